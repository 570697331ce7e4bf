"""docker-compose.yml is valid for Docker Compose (Debian's docker-compose validates it; no engine needed) and
describes the same services as the topology."""

import shutil
import subprocess

import pytest
from logbus.topology import load, services
from support import REPO

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def test_docker_compose_validates_the_generated_file():
    binary = shutil.which("docker-compose")
    assert binary, "docker-compose is not installed (scripts/setup installs Debian's docker-compose)"
    out = subprocess.run([binary, "-f", str(REPO / "docker-compose.yml"), "config", "--services"], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.split()) == sorted(s.name for s in services(load(), "compose"))
    out = subprocess.run([binary, "-f", str(REPO / "docker-compose.yml"), "config"], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "offline-airflow" in out.stdout and "service_healthy" in out.stdout


def test_every_service_runs_under_an_init_that_reaps_orphans():
    """``init: true`` on every service, as docker-compose resolves the file: without it a service's PID 1 (e.g.
    ``airflow standalone``) inherits the processes its children leave behind (the Spark JVMs of finished Airflow
    tasks) and never reaps them: zombies."""
    import yaml  # PyYAML: installed with Airflow

    binary = shutil.which("docker-compose")
    assert binary, "docker-compose is not installed (scripts/setup installs Debian's docker-compose)"
    out = subprocess.run([binary, "-f", str(REPO / "docker-compose.yml"), "config"], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    resolved = yaml.safe_load(out.stdout)["services"]
    assert sorted(resolved) == sorted(s.name for s in services(load(), "compose"))
    assert [name for name, svc in sorted(resolved.items()) if svc.get("init") is not True] == []

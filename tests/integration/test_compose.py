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

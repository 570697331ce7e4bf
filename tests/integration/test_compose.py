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


def test_the_secure_variant_validates_and_waits_for_security_init():
    """docker-compose.secure.yml (topology/secure.json): valid, the same services as the topology, security-init a
    one-shot container every broker waits for to complete, the secrets volume read-only everywhere else."""
    import yaml

    from logbus.topology import SECURE

    binary = shutil.which("docker-compose")
    assert binary, "docker-compose is not installed (scripts/setup installs Debian's docker-compose)"
    out = subprocess.run([binary, "-f", str(REPO / "docker-compose.secure.yml"), "config"], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    resolved = yaml.safe_load(out.stdout)["services"]
    assert sorted(resolved) == sorted(s.name for s in services(load(SECURE), "compose"))
    assert resolved["security-init"]["restart"] == "on-failure"
    for name, svc in resolved.items():
        volumes = [v.split(":") for v in svc["volumes"]]  # docker-compose 1.x resolves to source:target:mode
        mounts = {v[1]: len(v) > 2 and v[2] == "ro" for v in volumes if v[0] == "secrets"}
        assert mounts == {"/etc/logbus/secrets": name != "security-init"}, (name, svc["volumes"])
        if name.startswith(("live-broker", "offline-broker")):
            assert svc["depends_on"]["security-init"]["condition"] == "service_completed_successfully"


def test_the_three_datacenter_variant_validates_with_a_mirror_and_a_group_per_source():
    """docker-compose.three-dc.yml (topology/three-dc.json): valid, the same services as the topology; the offline
    datacenter runs one mirror per live datacenter, each in a consumer group of its own (the exactly-once mirror
    keeps its source offsets under that group on the offline cluster: one group for both would mix them)."""
    import yaml

    from logbus.topology import THREE_DC

    binary = shutil.which("docker-compose")
    assert binary, "docker-compose is not installed (scripts/setup installs Debian's docker-compose)"
    out = subprocess.run([binary, "-f", str(REPO / "docker-compose.three-dc.yml"), "config"], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    resolved = yaml.safe_load(out.stdout)["services"]
    assert sorted(resolved) == sorted(s.name for s in services(load(THREE_DC), "compose"))
    groups = {}
    for source in ("live-east", "live-west"):
        assert f"offline-mirror-{source}" in resolved
        props = (REPO / "docker" / "config-three-dc" / f"offline-mirror-{source}" / "consumer.properties").read_text()
        groups[source] = dict(line.split("=", 1) for line in props.splitlines())["group.id"]
        assert f"{source}-frontend1" in resolved and f"{source}-audit-counter" in resolved
    assert groups == {"live-east": "mirror-offline-live-east", "live-west": "mirror-offline-live-west"}

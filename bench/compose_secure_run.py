"""The secure compose variant (``docker-compose.secure.yml``, generated from ``topology/secure.json``) brought up as a
user would, checked from the host through its published ports, and torn down. Not a test (CI runs the default
variant's compose test); this records that the secure variant runs, in ``bench/results/compose_secure.md``.

Checks: every service healthy (or running, without a health check; ``security-init`` exits 0 after making the CA,
certificates, passwords, SCRAM users and ACLs), then through 127.0.0.1 only: the primary registry answers 401
without credentials and 200 over HTTPS with the admin's password (checked against the stack's own CA, copied out of
the ``secrets`` volume), a schema registered there is read back from the read-only registry, a SASL_SSL
(SCRAM-SHA-512) producer on live's EXTERNAL listener gets its records to offline through the mirror, a PLAINTEXT
client gets nothing, and the audit service answers 401 without its login and its report with it. Always ends with
``down -v`` and checks that nothing of the project is left.

Usage: .venv/bin/python bench/compose_secure_run.py      (needs Docker: bash scripts/docker-setup; ~6 minutes)
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROJECT = "logbus-secure-run"
COMPOSE = ["docker-compose", "-f", str(REPO / "docker-compose.secure.yml"), "-p", PROJECT]


def run(args: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=REPO)


def containers() -> dict[str, dict]:
    ids = run(["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={PROJECT}"]).stdout.split()
    out = {}
    for c in json.loads(run(["docker", "inspect", *ids]).stdout) if ids else []:
        health = c["State"].get("Health")
        out[c["Config"]["Labels"]["com.docker.compose.service"]] = {
            "id": c["Id"], "status": c["State"]["Status"], "exit": c["State"]["ExitCode"],
            "health": health["Status"] if health else None, "restarts": c["RestartCount"]}
    return out


def ready(name: str, c: dict) -> bool:
    if name == "security-init":
        return c["status"] == "exited" and c["exit"] == 0
    return c["status"] == "running" and c["health"] in (None, "healthy")


def main() -> int:
    import requests
    from confluent_kafka import Consumer, Producer

    setup = run(["bash", "scripts/docker-setup"], timeout=1800)
    if setup.returncode != 0:
        print(setup.stdout + setup.stderr)
        return 1
    figures: dict = {"started": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "checks": []}
    check = figures["checks"].append
    work = Path(tempfile.mkdtemp(prefix="logbus-secure-compose-"))
    try:
        t0 = time.monotonic()
        up = run([*COMPOSE, "up", "-d", "--no-build"], timeout=900)
        if up.returncode != 0:
            raise RuntimeError(up.stdout + up.stderr)
        deadline = time.monotonic() + 600
        while True:
            cs = containers()
            if cs and all(ready(n, c) for n, c in cs.items()):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"not ready: {[n for n, c in cs.items() if not ready(n, c)]}")
            time.sleep(2)
        figures["all_ready_s"] = round(time.monotonic() - t0, 1)
        figures["services"] = len(cs)
        check(f"all {len(cs)} services ready {figures['all_ready_s']} s after `up -d` (security-init exited 0)")
        registry_id = cs["live-registry"]["id"]
        copied = run(["docker", "cp", f"{registry_id}:/etc/logbus/secrets/.", str(work)])
        assert copied.returncode == 0, copied.stderr
        ca = str(work / "ca.pem")

        def password(principal: str) -> str:
            return (work / f"{principal}.properties").read_text().split("=", 1)[1].strip()

        http = requests.Session()
        http.trust_env, http.verify = False, ca
        assert http.get("https://127.0.0.1:8081/subjects", timeout=30).status_code == 401
        http.auth = ("admin", password("admin"))
        schema = {"type": "record", "name": "Signup", "fields": [{"name": "member_id", "type": "long"}]}
        r = http.post("https://127.0.0.1:8081/subjects/signups-value/versions", json={"schema": json.dumps(schema)},
                      timeout=30)
        assert r.status_code == 200, r.text
        sid = r.json()["id"]
        for _ in range(120):
            if http.get(f"https://127.0.0.1:8082/schemas/ids/{sid}", timeout=10).status_code == 200:
                break
            time.sleep(0.5)
        else:
            raise AssertionError("the read-only registry did not follow the primary")
        check("registry over HTTPS (the stack's CA): 401 without credentials; a schema registered with the admin's "
              "password on the primary (8081) read back from the read-only registry (8082)")
        client = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "admin",
                  "sasl.password": password("admin"), "ssl.ca.location": ca}
        producer = Producer({"bootstrap.servers": "127.0.0.1:19092", **client, "enable.idempotence": True})
        for i in range(100):
            producer.produce("secure-compose-check", str(i).encode(), str(i).encode())
        assert producer.flush(60) == 0
        consumer = Consumer({"bootstrap.servers": "127.0.0.1:29092", **client, "group.id": "secure-compose-check",
                             "auto.offset.reset": "earliest"})
        consumer.subscribe(["secure-compose-check"])
        seen: set[bytes] = set()
        deadline = time.monotonic() + 180
        while len(seen) < 100 and time.monotonic() < deadline:
            m = consumer.poll(1)
            if m is not None and not m.error():
                seen.add(m.value())
        consumer.close()
        assert len(seen) == 100, f"{len(seen)} of 100 mirrored"
        check("100 records produced over SASL_SSL (SCRAM-SHA-512) on live's EXTERNAL listener (127.0.0.1:19092) "
              "read on offline (127.0.0.1:29092) after the mirror")
        failed: list = []
        plaintext = Producer({"bootstrap.servers": "127.0.0.1:19092", "message.timeout.ms": 5000})
        plaintext.produce("page-views", b"x", on_delivery=lambda err, _m: failed.append(err))
        plaintext.flush(15)
        assert failed and failed[0] is not None
        check(f"a PLAINTEXT producer gets nothing through ({failed[0].name()})")
        audit = requests.Session()
        audit.trust_env, audit.verify = False, ca
        assert audit.get("https://127.0.0.1:8090/api/report", timeout=30).status_code == 401
        audit.auth = ("admin", password("admin"))
        report = audit.get("https://127.0.0.1:8090/api/report", timeout=30)
        assert report.status_code == 200, report.text
        tiers = sorted({row["tier"] for row in report.json()})
        check(f"audit service over HTTPS: 401 without its login, its report with it (tiers so far: {tiers})")
        figures["restarted"] = {n: c["restarts"] for n, c in containers().items() if c["restarts"]}
        check(f"containers restarted by Docker meanwhile: {figures['restarted'] or 'none'}")
        figures["result"] = "passed"
    except Exception as exc:  # noqa: BLE001 (recorded as the run's result)
        figures["result"] = f"FAILED: {type(exc).__name__}: {exc}"
        logs = run([*COMPOSE, "logs", "--no-color", "--tail", "15"], timeout=120)
        figures["logs_tail"] = logs.stdout[-6000:]
    finally:
        down = run([*COMPOSE, "down", "-v", "--remove-orphans"], timeout=600)
        left = run(["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={PROJECT}"]).stdout.split()
        volumes = [v for v in run(["docker", "volume", "ls", "-q"]).stdout.split() if v.startswith(PROJECT)]
        figures["down"] = f"down -v exit {down.returncode}; containers left {len(left)}, volumes left {len(volumes)}"
    write(figures)
    print((REPO / "bench" / "results" / "compose_secure.md").read_text())
    return 0 if figures["result"] == "passed" else 1


def write(f: dict) -> None:
    lines = [f"# The secure compose variant, run by hand — {f['started']}", "",
             "Command: `.venv/bin/python bench/compose_secure_run.py` (`docker-compose -f docker-compose.secure.yml "
             f"-p {PROJECT} up -d --no-build`, checks through 127.0.0.1, `down -v`).", "",
             f"Result: **{f['result']}**", ""]
    lines += [f"- {c}" for c in f["checks"]]
    lines += [f"- teardown: {f.get('down')}", ""]
    if f.get("logs_tail"):
        lines += ["Last log lines:", "", "```", f["logs_tail"], "```", ""]
    (REPO / "bench" / "results" / "compose_secure.md").write_text("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())

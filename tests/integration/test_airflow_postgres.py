"""``logbus airflow`` (LocalExecutor) on ``logbus postgres``, both real: the metadata is in PostgreSQL, not SQLite;
a ``kill -9`` of the scheduler while a task runs does not leave the DAG run stuck running (the task is reset or
failed and runs again, the run ends in success — read in PostgreSQL); and all of it survives stopping both and
starting them again (``airflow db migrate`` on the second start changes nothing).

The cluster is not under tmp_path when we are root: PostgreSQL runs as the ``postgres`` user then, and pytest keeps
its base directory (/tmp/pytest-of-root) 0700, so that user could not reach it; the test makes a directory of its
own under /tmp and removes it."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg2
import pytest
import requests
from logbus import postgres
from logbus.local import MARKER, airflow_healthy, leftovers
from support import REPO, free_port, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(720)]

DAG_ID = "logbus_sleeper"  # tests/dags/logbus_sleeper.py: one task sleeping 20 s, 2 retries


class Stack:
    """``logbus postgres`` and ``logbus airflow`` for one test: their logs and Airflow's home under tmp_path."""

    def __init__(self, tmp_path: Path, pg_dir: Path):
        self.tmp, self.pg_dir = tmp_path, pg_dir
        self.pg_port, self.api_port = free_port(), free_port()
        self.password_file = tmp_path / "secrets" / "airflow-db.password"  # made by `logbus postgres`
        self.procs: dict[str, subprocess.Popen] = {}
        passwords = tmp_path / "passwords.json"  # the admin login, written before the start as `logbus up` does
        passwords.write_text(json.dumps({"admin": "admin-test-password"}))
        venv_bin = Path(sys.executable).parent
        base = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "platform"), str(REPO)]),
                    PATH=os.pathsep.join([str(venv_bin), os.environ.get("PATH", "/usr/bin:/bin")]),
                    **{MARKER: str(tmp_path)})
        self.pg_env = base
        # the topology's Airflow settings (logbus.topology) on loopback and free ports, with the tests' DAG
        self.airflow_env = dict(
            base, AIRFLOW_HOME=str(tmp_path / "home"), AIRFLOW__CORE__DAGS_FOLDER=str(REPO / "tests" / "dags"),
            AIRFLOW__CORE__LOAD_EXAMPLES="False", AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="False",
            AIRFLOW__CORE__EXECUTOR="LocalExecutor", AIRFLOW__CORE__PARALLELISM="2",
            AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT="60",
            AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL="30",
            AIRFLOW__API__HOST="127.0.0.1", AIRFLOW__API__PORT=str(self.api_port),
            AIRFLOW__API__BASE_URL=f"http://127.0.0.1:{self.api_port}",
            AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="admin:admin",
            AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=str(passwords),
            AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT=str(free_port()),
            AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT=str(free_port()),
            **postgres.airflow_env("127.0.0.1", self.pg_port, "airflow", "airflow", self.password_file,
                                   program=str(venv_bin / "logbus")))
        self.base_url = f"http://127.0.0.1:{self.api_port}"

    def _start(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen:
        with open(self.tmp / f"{name}.log", "ab") as out:
            proc = subprocess.Popen([sys.executable, "-m", "logbus.cli", *argv], cwd=self.tmp, env=env,
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        self.procs[name] = proc
        return proc

    def log(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text(errors="replace")

    def start_postgres(self) -> None:
        proc = self._start("postgres", ["postgres", "--data-dir", str(self.pg_dir), "--host", "127.0.0.1",
                                        "--port", str(self.pg_port), "--database", "airflow", "--user", "airflow",
                                        "--password-file", str(self.password_file)], self.pg_env)
        wait_until(lambda: postgres.healthy("127.0.0.1", self.pg_port) or proc.poll() is not None, 60,
                   interval=0.2, what="logbus postgres accepting connections")
        assert proc.poll() is None, self.log("postgres")[-3000:]

    def start_airflow(self) -> float:
        began = time.monotonic()
        proc = self._start("airflow", ["airflow"], self.airflow_env)
        wait_until(lambda: airflow_healthy("127.0.0.1", self.api_port) or proc.poll() is not None, 240,
                   interval=1, what="Airflow healthy (metadata database and scheduler)")
        assert proc.poll() is None, self.log("airflow")[-5000:]
        return time.monotonic() - began

    def stop(self, name: str, timeout: float = 60) -> int:
        proc = self.procs.pop(name)
        proc.send_signal(signal.SIGTERM)
        return proc.wait(timeout=timeout)

    def kill_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.procs.clear()
        for pid in leftovers(self.tmp):  # the servers' backends and Airflow's children carry the marker too
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def query(self, sql: str, *params) -> list[tuple]:
        """As Airflow's own user, with the password of its file, over TCP; one connection a query."""
        conn = psycopg2.connect(host="127.0.0.1", port=self.pg_port, dbname="airflow", user="airflow",
                                password=postgres.read_password(self.password_file), connect_timeout=5)
        try:
            with conn.cursor() as cur:
                cur.execute(sql, params)
                return cur.fetchall()
        finally:
            conn.close()

    def scheduler_pid(self) -> int | None:
        found = re.findall(r"scheduler (?:started|restarted) \(pid (\d+)", self.log("airflow"))
        return int(found[-1]) if found else None

    def token(self) -> str:
        r = requests.post(f"{self.base_url}/auth/token", json={"username": "admin", "password": "admin-test-password"},
                          timeout=30)
        r.raise_for_status()
        return r.json()["access_token"]


@pytest.fixture
def pg_dir(tmp_path):
    if os.geteuid() != 0:
        yield tmp_path / "pg"
        return
    base = Path(tempfile.mkdtemp(prefix="logbus-test-pg-", dir="/tmp"))
    os.chmod(base, 0o711)  # searchable by the postgres user, listable by nobody else
    try:
        yield base / "pg"
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def stack(tmp_path, pg_dir):
    s = Stack(tmp_path, pg_dir)
    try:
        yield s
    finally:
        s.kill_all()


def _dag_run(stack: Stack, run_id: str) -> str | None:
    rows = stack.query("SELECT state FROM dag_run WHERE dag_id = %s AND run_id = %s", DAG_ID, run_id)
    return rows[0][0] if rows else None


def _task(stack: Stack, run_id: str) -> tuple[str | None, int] | None:
    rows = stack.query("SELECT state, try_number FROM task_instance WHERE dag_id = %s AND run_id = %s", DAG_ID,
                       run_id)
    return rows[0] if rows else None


def test_airflow_on_postgres_survives_a_killed_scheduler_and_a_restart_of_both(stack, tmp_path):
    # 1. first start: initdb, the role and the database, then Airflow's schema in them
    began = time.monotonic()
    stack.start_postgres()
    print(f"postgres up after {time.monotonic() - began:.1f} s (initdb included)")
    assert stack.password_file.stat().st_mode & 0o777 == 0o600
    assert postgres.read_password(stack.password_file) not in json.dumps(stack.airflow_env)  # only the file has it
    print(f"Airflow healthy after {stack.start_airflow():.0f} s")
    text = stack.log("airflow")
    assert "db-migrate: database ready" in text
    [(version,)] = stack.query("SELECT version_num FROM alembic_version")
    tables = {t for (t,) in stack.query("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
    assert {"dag_run", "task_instance", "job", "serialized_dag"} <= tables
    assert not list((tmp_path / "home").glob("*.db"))  # no SQLite database beside
    # the scheduler's heartbeat is in PostgreSQL
    assert stack.query("SELECT count(*) FROM job WHERE job_type = 'SchedulerJob' AND state = 'running'")[0][0] >= 1

    # 2. a run of the sleeper; kill -9 of the scheduler while its task runs
    headers = {"Authorization": f"Bearer {stack.token()}"}
    wait_until(lambda: requests.get(f"{stack.base_url}/api/v2/dags/{DAG_ID}", headers=headers,
                                    timeout=10).status_code == 200, 120, interval=1, what="the DAG parsed")
    r = requests.post(f"{stack.base_url}/api/v2/dags/{DAG_ID}/dagRuns", headers=headers,
                      json={"logical_date": None}, timeout=30)
    assert r.status_code == 200, r.text
    run_id = r.json()["dag_run_id"]
    wait_until(lambda: (_task(stack, run_id) or (None,))[0] == "running", 120, interval=0.5,
               what="the task running")
    time.sleep(3)
    scheduler = stack.scheduler_pid()
    os.kill(scheduler, signal.SIGKILL)
    killed = time.monotonic()
    assert _dag_run(stack, run_id) == "running"
    wait_until(lambda: stack.scheduler_pid() != scheduler, 30, what="a new scheduler")
    wait_until(lambda: _dag_run(stack, run_id) in ("success", "failed"), 240, interval=2,
               what="the DAG run finished after the scheduler's kill")
    print(f"the run finished {time.monotonic() - killed:.0f} s after the scheduler's kill")
    state, tries = _task(stack, run_id)
    assert (_dag_run(stack, run_id), state) == ("success", "success")
    assert tries >= 2  # the killed attempt did not count as done: the task ran again
    history = stack.query("SELECT try_number, state FROM task_instance_history WHERE dag_id = %s AND run_id = %s",
                          DAG_ID, run_id)
    print(f"attempts: {sorted(history)} then {(tries, state)}")
    # every component's pools together stay far below PostgreSQL's max_connections (100, 3 of them reserved)
    [(connections,)] = stack.query("SELECT count(*) FROM pg_stat_activity WHERE usename = 'airflow'")
    print(f"Airflow's connections to PostgreSQL: {connections - 1} (and this query's)")
    assert 2 <= connections <= 50

    # 3. both stopped, both started again: the same database, the run still there, db migrate harmless
    stopping = time.monotonic()
    assert stack.stop("airflow") == 0
    assert stack.stop("postgres") == 0
    print(f"both stopped in {time.monotonic() - stopping:.1f} s")
    assert "received fast shutdown request" in stack.log("postgres")
    assert "server exited (code 0)" in stack.log("postgres")
    stack.start_postgres()
    assert stack.log("postgres").count("initdb ") == 1
    print(f"Airflow healthy again after {stack.start_airflow():.0f} s")
    assert stack.log("airflow").count("db-migrate: database ready") == 2
    assert stack.query("SELECT version_num FROM alembic_version") == [(version,)]
    assert _dag_run(stack, run_id) == "success" and _task(stack, run_id) == ("success", tries)
    assert stack.stop("airflow") == 0
    assert stack.stop("postgres") == 0
    time.sleep(0.5)
    assert leftovers(tmp_path) == []  # no server backend, Airflow component, worker or task left


def test_later_starts_make_what_is_missing_and_take_the_password_file_as_the_truth(tmp_path, pg_dir):
    """Without Airflow: a later start creates a database and role not made before, a changed password file
    changes the password, and a ``kill -9`` of ``logbus postgres`` stops its server too (no orphan keeping the
    port and the data directory)."""
    port, password_file = free_port(), tmp_path / "pw"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "platform"), str(REPO)]), **{MARKER: str(tmp_path)})
    procs: list[subprocess.Popen] = []

    def start(user: str, database: str) -> subprocess.Popen:
        with open(tmp_path / "postgres.log", "ab") as out:
            proc = subprocess.Popen([sys.executable, "-m", "logbus.cli", "postgres", "--data-dir", str(pg_dir),
                                     "--port", str(port), "--user", user, "--database", database,
                                     "--password-file", str(password_file)], env=env, stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        procs.append(proc)
        wait_until(lambda: postgres.healthy("127.0.0.1", port) or proc.poll() is not None, 60, interval=0.2,
                   what="logbus postgres accepting connections")
        assert proc.poll() is None, (tmp_path / "postgres.log").read_text()[-3000:]
        return proc

    def login(user: str, database: str, password: str) -> str:
        with psycopg2.connect(host="127.0.0.1", port=port, dbname=database, user=user, password=password,
                              connect_timeout=5) as conn, conn.cursor() as cur:
            cur.execute("SELECT current_user || '@' || current_database()")
            return cur.fetchone()[0]

    try:
        first = start("airflow", "airflow")
        old = postgres.read_password(password_file)
        assert login("airflow", "airflow", old) == "airflow@airflow"
        first.send_signal(signal.SIGTERM)
        assert first.wait(30) == 0

        password_file.write_text("a new one\n")
        second = start("loads", "warehouse")
        assert login("loads", "warehouse", "a new one") == "loads@warehouse"
        assert login("airflow", "airflow", old) == "airflow@airflow"  # the other role is not this start's
        with pytest.raises(psycopg2.OperationalError, match="password authentication failed"):
            login("loads", "warehouse", old)
        os.kill(second.pid, signal.SIGKILL)
        second.wait()
        wait_until(lambda: not leftovers(tmp_path), 30, what="the server gone with its logbus postgres")
        assert not postgres.healthy("127.0.0.1", port)

        third = start("loads", "warehouse")  # after a kill -9: recovery, same data
        assert login("loads", "warehouse", "a new one") == "loads@warehouse"
        third.send_signal(signal.SIGTERM)
        assert third.wait(30) == 0
        assert (tmp_path / "postgres.log").read_text().count("logbus postgres: initdb ") == 1
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        for pid in leftovers(tmp_path):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

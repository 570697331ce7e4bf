"""``logbus postgres`` as root on a data directory the postgres user cannot reach (under pytest's tmp_path, below the
0700 /tmp/pytest-of-root), with no permission changed: initdb and the server run in a private mount namespace of
their own where the directory is bind-mounted on /run/logbus-postgres/<hash>. Airflow's user logs in over TCP,
SIGTERM is a fast shutdown with exit code 0, a second start has the data of the first, a kill -9 of ``logbus
postgres`` takes its server with it, and the mount is never seen on the host. Without CAP_SYS_ADMIN, the one-line
refusal."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import psycopg2
import pytest
from logbus import postgres
from logbus.local import MARKER, leftovers
from support import REPO, free_port, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def _skip_unless_root_with_postgres() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: only then does PostgreSQL run as the postgres user, for whom tmp_path is closed")
    if not postgres.installed_versions():
        pytest.skip("PostgreSQL is not installed (bash scripts/setup)")


def _mounted(path: Path, pid: int | str = "self") -> bool:
    """Whether ``path`` is a mount point in the mount namespace of ``pid``."""
    return any(line.split()[4] == str(path) for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines())


def _modes(paths: list[Path]) -> list[tuple[str, int, int]]:
    return [(str(p), stat.S_IMODE(p.stat().st_mode), p.stat().st_uid) for p in paths]


class Postgres:
    def __init__(self, tmp_path: Path):
        self.tmp = tmp_path
        self.data = tmp_path / "data" / "server"  # short enough for D/run/.s.PGSQL.<port> (107 bytes)
        self.port = free_port()
        self.password_file = tmp_path / "secrets" / "airflow-db.password"
        self.mount = postgres.mount_point(self.data)
        self.env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "platform"), str(REPO)]),
                        **{MARKER: str(tmp_path)})
        self.procs: list[subprocess.Popen] = []

    def log(self) -> str:
        return (self.tmp / "postgres.log").read_text(errors="replace")

    def start(self) -> subprocess.Popen:
        with open(self.tmp / "postgres.log", "ab") as out:
            proc = subprocess.Popen([sys.executable, "-m", "logbus.cli", "postgres", "--data-dir", str(self.data),
                                     "--host", "127.0.0.1", "--port", str(self.port), "--database", "airflow",
                                     "--user", "airflow", "--password-file", str(self.password_file)],
                                    env=self.env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        self.procs.append(proc)
        wait_until(lambda: postgres.healthy("127.0.0.1", self.port) or proc.poll() is not None, 90, interval=0.2,
                   what="logbus postgres accepting connections")
        assert proc.poll() is None, self.log()[-3000:]
        return proc

    def sql(self, statement: str) -> list[tuple]:
        conn = psycopg2.connect(host="127.0.0.1", port=self.port, dbname="airflow", user="airflow",
                                password=postgres.read_password(self.password_file), connect_timeout=5)
        try:
            with conn, conn.cursor() as cur:
                cur.execute(statement)
                return cur.fetchall() if cur.description else []
        finally:
            conn.close()

    def server_of(self, proc: subprocess.Popen) -> int:
        """The one child of ``logbus postgres``: it must be PostgreSQL itself, not a wrapper."""
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        assert len(children) == 1, children
        return int(children[0])

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        for pid in leftovers(self.tmp):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture
def pg(tmp_path):
    _skip_unless_root_with_postgres()
    p = Postgres(tmp_path)
    try:
        yield p
    finally:
        p.kill_all()
        _remove_mount_point(p.mount)


def _remove_mount_point(path: Path) -> None:
    """The test's own mount point, once none of its processes is left (logbus postgres leaves it: see mount_point)."""
    try:
        path.rmdir()
    except OSError:
        pass


def test_an_unreachable_data_dir_is_served_through_a_private_bind_mount(pg, tmp_path):
    blocked = postgres.unreachable(pg.data, *_postgres_ids())
    assert blocked is not None  # the case under test
    above = [p for p in pg.data.parents if p.exists()]  # tmp_path and up: existing before the start
    before = _modes(above)

    began = time.monotonic()
    first = pg.start()
    print(f"first start (initdb included) {time.monotonic() - began:.1f} s")
    server = pg.server_of(first)
    exe = Path(os.readlink(f"/proc/{server}/exe"))
    assert exe.name == "postgres" and exe.parent.parent.parent == postgres.INSTALL_ROOT  # no wrapper left
    assert os.stat(f"/proc/{server}").st_uid == _postgres_ids()[0]
    argv = Path(f"/proc/{server}/cmdline").read_bytes().split(b"\0")
    assert argv[1:3] == [b"-D", str(pg.mount / "pgdata").encode()]
    assert _mounted(pg.mount, server) and not _mounted(pg.mount)  # in its namespace only
    assert not any(pg.mount.iterdir())  # the host's mount point stays empty
    assert "through a bind mount on" in pg.log()

    assert pg.sql("SELECT current_user || '@' || current_database()") == [("airflow@airflow",)]
    pg.sql("CREATE TABLE kept (note text); INSERT INTO kept VALUES ('from the first start')")
    assert (pg.data / "pgdata" / "PG_VERSION").exists() and not (pg.data / "pgdata.initdb").exists()
    assert postgres.socket_dir(pg.data, pg.port) == pg.data / "run"
    assert (pg.data / "run" / f".s.PGSQL.{pg.port}").is_socket()  # the socket in D/run, as ever

    first.send_signal(signal.SIGTERM)
    assert first.wait(30) == 0
    assert "received fast shutdown request" in pg.log() and "server exited (code 0)" in pg.log()
    assert not _mounted(pg.mount) and not any(pg.mount.iterdir())
    assert _modes(above) == before  # no directory above D opened up (/tmp/pytest-of-root still 0700)
    assert postgres.unreachable(pg.data, *_postgres_ids()) == blocked
    assert stat.S_IMODE(pg.mount.stat().st_mode) == stat.S_IMODE(pg.mount.parent.stat().st_mode) == 0o755

    began = time.monotonic()
    second = pg.start()
    print(f"second start {time.monotonic() - began:.1f} s")
    assert pg.sql("SELECT note FROM kept") == [("from the first start",)]
    assert pg.log().count("logbus postgres: initdb ") == 1
    server = pg.server_of(second)
    os.kill(second.pid, signal.SIGKILL)  # its server must not outlive it
    second.wait()
    wait_until(lambda: not Path(f"/proc/{server}").exists() and not leftovers(tmp_path), 30,
               what="the server gone with its logbus postgres")
    assert not postgres.healthy("127.0.0.1", pg.port)

    third = pg.start()  # after the kill -9: recovery, the same data
    assert pg.sql("SELECT count(*) FROM kept") == [(1,)]
    third.send_signal(signal.SIGTERM)
    assert third.wait(30) == 0
    time.sleep(0.2)
    assert leftovers(tmp_path) == []
    assert not _mounted(pg.mount)


def _postgres_ids() -> tuple[int, int]:
    entry = postgres.pwd.getpwnam(postgres.SERVER_USER)
    return entry.pw_uid, entry.pw_gid


def test_without_cap_sys_admin_it_is_refused_in_one_line(tmp_path):
    _skip_unless_root_with_postgres()
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) is not installed")
    data = tmp_path / "closed" / "data"
    (tmp_path / "closed").mkdir(mode=0o700)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "platform"), str(REPO)]))
    done = subprocess.run([setpriv, "--bounding-set=-sys_admin", "--inh-caps=-sys_admin", "--",
                           sys.executable, "-m", "logbus.cli", "postgres", "--data-dir", str(data), "--port",
                           str(free_port()), "--password-file", str(tmp_path / "pw")],
                          env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(
        f"logbus: postgres: the postgres user cannot reach {data}: ")
    assert "private mount namespace" in done.stderr and "Operation not permitted" in done.stderr
    assert "chmod o+x" in done.stderr
    assert not data.exists() and not (tmp_path / "pw").exists()
    _remove_mount_point(postgres.mount_point(data))

"""``logbus postgres`` as root when the postgres user cannot reach the data directory: the mount point, the exec
chain (run here with stand-ins for unshare, mount and setpriv, so its shell parts are exercised without root), which
command a server step gets in each case, and the one-line refusals when a private mount namespace is not possible.
The real namespace is in tests/integration/test_postgres_unreachable.py."""

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest
from logbus import postgres
from logbus.cli import main
from logbus.postgres import (Account, Options, PostgresError, Server, Tools, mount_point, namespace_command,
                             probe_command)

pytestmark = [pytest.mark.unit, pytest.mark.timeout(20)]

FAKE_UID, FAKE_GID = 4242, 4343


def test_mount_point_is_fixed_short_and_one_per_data_dir():
    first = mount_point(Path("/root/logbus/state/topology/offline-postgres/data/server"))
    assert first.parent == Path("/run/logbus-postgres") == postgres.MOUNT_BASE
    assert len(first.name) == 12 and int(first.name, 16) >= 0
    assert mount_point(Path("/root/logbus/state/topology/offline-postgres/data/server")) == first
    assert mount_point(Path("/root/logbus/state/topology/offline-postgres/data/server2")) != first
    assert mount_point(Path("/d"), Path("/elsewhere")).parent == Path("/elsewhere")
    # the socket under the mount point always fits in sun_path
    assert len(str(first / "run" / ".s.PGSQL.65535")) <= postgres.SOCKET_PATH_MAX


def test_namespace_command_mounts_as_root_then_switches_user_then_checks_the_parent():
    tools = Tools("/usr/bin/unshare", "/usr/bin/mount", "/usr/bin/setpriv")
    argv = ["/usr/lib/postgresql/15/bin/postgres", "-D", "/run/logbus-postgres/abc/pgdata"]
    cmd = namespace_command(argv, Path("/root/x/data"), Path("/run/logbus-postgres/abc"), 101, 104, 777, tools)
    assert cmd[:5] == ["/usr/bin/unshare", "--mount", "--propagation", "private", "--"]
    assert cmd[5:12] == ["/bin/sh", "-c", postgres.MOUNT_SCRIPT, "logbus-postgres-mount", "/usr/bin/mount",
                         "/root/x/data", "/run/logbus-postgres/abc"]
    assert cmd[12:18] == ["/usr/bin/setpriv", "--reuid=101", "--regid=104", "--clear-groups", "--pdeathsig=INT",
                          "--"]
    assert cmd[18:22] == ["/bin/sh", "-c", postgres.PARENT_SCRIPT, "777"]
    assert cmd[22:] == argv  # the last program: the one the pid ends up being
    assert probe_command(Path("/root"), Path("/run/logbus-postgres/abc"), tools) == [
        "/usr/bin/unshare", "--mount", "--propagation", "private", "--", "/usr/bin/mount", "--no-mtab", "--bind",
        "/root", "/run/logbus-postgres/abc"]


def _script(path: Path, text: str) -> str:
    path.write_text("#!/bin/sh\n" + text)
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def stand_ins(tmp_path):
    """unshare and setpriv that log their arguments and exec what follows ``--``; a mount that logs its own."""
    skip_to_program = 'while [ "$1" != "--" ]; do shift; done; shift; exec "$@"\n'
    log = tmp_path / "calls.log"
    tools = Tools(_script(tmp_path / "unshare", f'echo "unshare $*" >> {log}\n{skip_to_program}'),
                  _script(tmp_path / "mount", f'echo "mount $*" >> {log}\nexit "${{FAKE_MOUNT_EXIT:-0}}"\n'),
                  _script(tmp_path / "setpriv", f'echo "setpriv $*" >> {log}\n{skip_to_program}'))
    return tools, log


def test_the_chain_ends_as_the_program_in_the_same_process_in_the_mount_point(tmp_path, stand_ins):
    tools, log = stand_ins
    target = tmp_path / "mnt"
    target.mkdir()
    program = ["/bin/sh", "-c", 'echo "pid=$$ cwd=$(pwd)"; cat; exit 7']
    cmd = namespace_command(program, tmp_path / "data", target, FAKE_UID, FAKE_GID, os.getpid(), tools)
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    out, _ = proc.communicate("the single-user backend's input\n", timeout=10)
    assert out.splitlines() == [f"pid={proc.pid} cwd={target}", "the single-user backend's input"]
    assert proc.returncode == 7  # the program's exit code, through every exec
    calls = log.read_text().splitlines()
    assert calls[0].startswith("unshare --mount --propagation private -- /bin/sh -c ")
    assert calls[1] == f"mount --no-mtab --bind {tmp_path / 'data'} {target}"
    assert calls[2].startswith(f"setpriv --reuid={FAKE_UID} --regid={FAKE_GID} --clear-groups --pdeathsig=INT -- ")
    assert len(calls) == 3


def test_the_chain_stops_when_the_mount_fails_or_the_parent_is_gone(tmp_path, stand_ins):
    tools, log = stand_ins
    target = tmp_path / "mnt"
    target.mkdir()
    marker = tmp_path / "ran"
    program = ["/bin/sh", "-c", f"touch {marker}"]
    failed = subprocess.run(namespace_command(program, tmp_path, target, 1, 1, os.getpid(), tools),
                            env=dict(os.environ, FAKE_MOUNT_EXIT="32"), timeout=10)
    assert failed.returncode == 125 and not marker.exists()
    assert [line.split()[0] for line in log.read_text().splitlines()] == ["unshare", "mount"]  # no setpriv
    # a parent that is not ours: as if logbus postgres died before the parent-death signal was set again
    orphan = subprocess.run(namespace_command(program, tmp_path, target, 1, 1, 1, tools), timeout=10)
    assert orphan.returncode == 1 and not marker.exists()
    ok = subprocess.run(namespace_command(program, tmp_path, target, 1, 1, os.getpid(), tools), timeout=10)
    assert ok.returncode == 0 and marker.exists()


def test_a_signal_to_the_pid_reaches_the_last_program(tmp_path, stand_ins):
    tools, _ = stand_ins
    target = tmp_path / "mnt"
    target.mkdir()
    program = ["/bin/sh", "-c", 'trap "echo fast shutdown; exit 0" INT; echo ready; while :; do sleep 0.05; done']
    # SIGINT at its default in the chain: a run started in the background by a non-interactive shell (a CI job's
    # `cmd &`) inherits SIGINT ignored, and a shell cannot trap a signal ignored on entry (PostgreSQL, a C program,
    # installs its own handler and is not affected)
    proc = subprocess.Popen(namespace_command(program, tmp_path, target, 1, 1, os.getpid(), tools),
                            stdout=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert proc.stdout.readline() == "ready\n"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 0
        assert proc.stdout.read() == "fast shutdown\n"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# -- the decision, with a stand-in account and binaries ----------------------------------------------------------


@pytest.fixture
def server(tmp_path, monkeypatch):
    monkeypatch.setattr(postgres, "account", lambda: Account("postgres", FAKE_UID, FAKE_GID))
    monkeypatch.setattr(postgres, "bindir", lambda pgdata: Path("/usr/lib/postgresql/15/bin"))
    data = tmp_path / "closed" / "data"
    (tmp_path / "closed").mkdir(mode=0o700)
    return Server(Options(data, "127.0.0.1", 5432, "airflow", "airflow", tmp_path / "pw"))


@pytest.fixture
def open_base():
    """A directory every user can search, outside pytest's 0700 base: where mount points are made."""
    base = Path(tempfile.mkdtemp(prefix="logbus-test-mnt-", dir="/tmp"))
    base.chmod(0o755)
    try:
        yield base / "logbus-postgres"
    finally:
        shutil.rmtree(base)


class _Popen:
    def __init__(self, argv, **kwargs):
        self.argv, self.kwargs = argv, kwargs


def test_a_reachable_data_dir_runs_the_program_as_today(server, monkeypatch):
    monkeypatch.setattr(postgres.subprocess, "Popen", _Popen)
    argv = ["/usr/lib/postgresql/15/bin/postgres", "-D", str(server.pgdata)]
    proc = server._popen(argv)
    assert server.mount is None and proc.argv == argv
    assert (proc.kwargs["user"], proc.kwargs["group"], proc.kwargs["extra_groups"]) == (FAKE_UID, FAKE_GID, [])
    assert proc.kwargs["cwd"] == server.opts.data_dir and proc.kwargs["process_group"] == 0
    assert server.seen(server.pgdata) == server.pgdata


def test_an_unreachable_data_dir_gets_the_namespace_chain(server, monkeypatch, stand_ins, open_base):
    tools, log = stand_ins
    monkeypatch.setattr(postgres, "MOUNT_BASE", open_base)
    monkeypatch.setattr(postgres, "find_tools", lambda: tools)
    blocked = server.opts.data_dir.parent
    server._use_namespace(blocked, set())  # the probe: the stand-in mount, which succeeds
    target = mount_point(server.opts.data_dir, open_base)
    assert server.mount == target and target.is_dir()
    assert [oct(p.stat().st_mode & 0o777) for p in (open_base, target)] == ["0o755", "0o755"]
    assert log.read_text().splitlines() == [f"unshare --mount --propagation private -- {tools.mount} --no-mtab "
                                            f"--bind {blocked} {target}", f"mount --no-mtab --bind {blocked} {target}"]
    assert server.seen(server.pgdata) == target / "pgdata"
    assert server.seen(server.opts.data_dir / "run") == target / "run"
    monkeypatch.setattr(postgres.subprocess, "Popen", _Popen)
    proc = server._popen(["postgres", "-D", str(target / "pgdata")])
    assert proc.argv == namespace_command(["postgres", "-D", str(target / "pgdata")], server.opts.data_dir, target,
                                          FAKE_UID, FAKE_GID, os.getpid(), tools)
    assert "user" not in proc.kwargs and "group" not in proc.kwargs  # root until setpriv
    assert proc.kwargs["process_group"] == 0 and proc.kwargs["preexec_fn"] == server._in_child


def test_a_namespace_that_is_not_permitted_is_refused_in_one_line(server, tmp_path, monkeypatch, stand_ins,
                                                                   open_base, capsys):
    tools, _ = stand_ins
    denied = Tools(_script(tmp_path / "unshare-denied",
                           'echo "unshare: unshare failed: Operation not permitted" >&2\nexit 1\n'),
                   tools.mount, tools.setpriv)
    monkeypatch.setattr(postgres, "MOUNT_BASE", open_base)
    monkeypatch.setattr(postgres, "find_tools", lambda: denied)
    with pytest.raises(PostgresError) as caught:
        server.prepare()
    text = str(caught.value)
    assert "\n" not in text and server.mount is None
    blocked = postgres.unreachable(server.opts.data_dir, FAKE_UID, FAKE_GID)
    assert text.startswith(f"the postgres user cannot reach {server.opts.data_dir}: {blocked} is not searchable")
    assert "not possible here: unshare: unshare failed: Operation not permitted (chmod o+x" in text
    assert not server.opts.data_dir.exists() and not server.opts.password_file.exists()


def test_a_mount_point_the_user_cannot_reach_either_is_refused(server, monkeypatch, stand_ins, tmp_path):
    tools, log = stand_ins
    monkeypatch.setattr(postgres, "MOUNT_BASE", tmp_path / "closed" / "mnt")  # under the same 0700 directory
    monkeypatch.setattr(postgres, "find_tools", lambda: tools)
    with pytest.raises(PostgresError, match="cannot reach .* either"):
        server.prepare()
    assert not log.exists()  # refused before the probe


@pytest.mark.skipif(os.geteuid() != 0, reason="a real unshare and bind mount need root")
def test_the_real_probe_as_root(server, monkeypatch, open_base):
    """With util-linux's own tools: the probe mounts in a namespace of its own, where CAP_SYS_ADMIN allows it,
    and leaves no mount on the host."""
    monkeypatch.setattr(postgres, "MOUNT_BASE", open_base)
    with open("/proc/self/status") as f:
        caps = int(next(line for line in f if line.startswith("CapEff:")).split()[1], 16)
    target = mount_point(server.opts.data_dir, open_base)
    if caps & (1 << 21):  # CAP_SYS_ADMIN
        server._use_namespace(server.opts.data_dir.parent, set())
        assert server.mount == target
    else:
        with pytest.raises(PostgresError, match="not possible here"):
            server._use_namespace(server.opts.data_dir.parent, set())
    assert str(target) not in Path("/proc/self/mountinfo").read_text()


@pytest.mark.skipif(os.geteuid() != 0 or not postgres.installed_versions(), reason="as root with PostgreSQL")
def test_the_cli_refuses_in_one_line_when_the_tools_are_missing(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(postgres, "TOOL_PATH", str(tmp_path / "nothing"))
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    code = main(["postgres", "--data-dir", str(closed / "data"), "--port", "1", "--password-file",
                 str(tmp_path / "pw")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "unshare, mount, setpriv not found (Debian package util-linux)" in err

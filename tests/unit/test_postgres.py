"""``logbus postgres``'s pure parts: arguments refused in one line with exit code 2 before anything starts; the
password file (made once, 0600, the truth afterwards); the URL and Airflow's settings, with no password in them;
the single-user backend's input and its marker rows; which binaries a cluster needs; the wire health probe against
an in-process listener."""

import os
import shlex
import socket
import stat
import struct
import threading
from pathlib import Path

import pytest
from logbus import postgres
from logbus.cli import main
from logbus.postgres import (PostgresError, PostgresMissing, airflow_env, bindir, bootstrap_sql, create_database_sql,
                             ensure_password_file, healthy, installed_versions, markers, options, read_password,
                             socket_dir, unreachable, url)

pytestmark = [pytest.mark.unit, pytest.mark.timeout(10)]


@pytest.mark.parametrize("args, message", [
    (["--port", "0"], "--port must be from 1 to 65535, not 0"),
    (["--port", "x"], "--port must be a number"),
    (["--host", "a,b"], "--host must be one address"),
    (["--host", ""], "--host must be one address"),
    (["--user", "Airflow"], "--user must be 1-63 of a-z"),
    (["--user", "pg_airflow"], "names starting with pg_ are PostgreSQL's own"),
    (["--database", "1db"], "--database must be 1-63"),
    (["--database", "template1"], "one of PostgreSQL's own databases"),
    (["--database", "a" * 64], "--database must be 1-63"),
])
def test_bad_arguments_are_one_line_and_exit_2(tmp_path, capsys, args, message):
    data = tmp_path / "data"
    code = main(["postgres", "--data-dir", str(data), "--password-file", str(tmp_path / "pw"), *args])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("logbus: postgres: ") and message in err and err.count("\n") == 1
    assert not data.exists() and not (tmp_path / "pw").exists()  # refused before touching anything


def test_password_file_is_made_once_with_mode_0600_and_then_read(tmp_path):
    path = tmp_path / "secrets" / "airflow.password"
    first = ensure_password_file(path)
    assert len(first) >= 24 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert ensure_password_file(path) == first == read_password(path)
    assert sorted(p.name for p in path.parent.iterdir()) == ["airflow.password"]  # no temporary file left
    path.write_text("chosen by the operator\n")
    assert ensure_password_file(path) == "chosen by the operator"


@pytest.mark.parametrize("text", ["", "\n", "two\nlines\n", "tab\there"])
def test_unusable_password_files_are_refused(tmp_path, text):
    path = tmp_path / "pw"
    path.write_text(text)
    with pytest.raises(PostgresError, match="password"):
        read_password(path)


def test_url_encodes_the_password():
    assert url("db", 5432, "airflow", "airflow", "p@ss:w/rd%") == \
        "postgresql+psycopg2://airflow:p%40ss%3Aw%2Frd%25@db:5432/airflow"
    assert url("db", 1, "a", "u", "x", "asyncpg").startswith("postgresql+asyncpg://u:x@db:1/a")


def test_airflow_env_names_a_command_not_the_password(tmp_path):
    path = tmp_path / "dir with space" / "pw"
    path.parent.mkdir()
    path.write_text("s3cret\n")
    env = airflow_env("offline-postgres", 5432, "airflow", "airflow", path, program="/venv/bin/logbus")
    assert not any("s3cret" in value for value in env.values())
    sync = shlex.split(env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD"])  # as Airflow's run_command splits it
    assert sync == ["/venv/bin/logbus", "postgres-url", "--host", "offline-postgres", "--port", "5432",
                    "--database", "airflow", "--user", "airflow", "--password-file", str(path)]
    assert shlex.split(env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC_CMD"]) == [*sync, "--driver", "asyncpg"]
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_POOL_SIZE"] == "3"
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_MAX_OVERFLOW"] == "5"
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_POOL_PRE_PING"] == "True"


def test_postgres_url_verb_prints_what_airflow_reads(tmp_path, capsys):
    path = tmp_path / "pw"
    path.write_text("s3cret\n")
    env = airflow_env("127.0.0.1", 15432, "airflow", "airflow", path)
    assert main(shlex.split(env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC_CMD"])[1:]) == 0
    assert capsys.readouterr().out == "postgresql+asyncpg://airflow:s3cret@127.0.0.1:15432/airflow"  # no line end
    assert main(["postgres-url", "--password-file", str(tmp_path / "missing")]) == 2
    assert "cannot read the password file" in capsys.readouterr().err


def test_bootstrap_sql_quotes_the_password_and_is_one_statement_a_line():
    sql = bootstrap_sql("airflow", "airflow", "it's")
    lines = sql.splitlines()
    assert lines[0] == "SET log_min_error_statement = panic"  # before the statement that carries the password
    assert "PASSWORD 'it''s'" in lines[1] and 'ALTER ROLE "airflow"' in lines[1] and 'CREATE ROLE "airflow"' in lines[1]
    assert len(lines) == 4 and sql.endswith("\n")
    with pytest.raises(PostgresError):
        bootstrap_sql("airflow", "airflow", "two\nlines")
    assert create_database_sql("airflow", "airflow").startswith('CREATE DATABASE "airflow" OWNER "airflow"\n')


def test_markers_read_the_single_user_backends_rows():
    output = ('backend> \t 1: ?column?\t(typeid = 25, len = -1, typmod = -1, byval = f)\n\t----\n'
              '\t 1: ?column? = "logbus-role"\t(typeid = 25, len = -1, typmod = -1, byval = f)\n\t----\n'
              'backend> \t 1: ?column?\t(typeid = 25, len = -1, typmod = -1, byval = f)\n\t----\nbackend> ')
    assert markers(output) == {"logbus-role"}  # the database row is absent: the query found none
    assert markers("") == set()


def test_binaries_follow_the_clusters_version_else_the_highest(tmp_path):
    root = tmp_path / "lib"
    for version in ("13", "15", "16"):
        (root / version / "bin").mkdir(parents=True)
        (root / version / "bin" / "postgres").touch()
    (root / "common" / "bin").mkdir(parents=True)
    assert installed_versions(root) == [16, 15, 13]
    pgdata = tmp_path / "pgdata"
    assert bindir(pgdata, root) == root / "16" / "bin"
    pgdata.mkdir()
    (pgdata / "PG_VERSION").write_text("15\n")
    assert bindir(pgdata, root) == root / "15" / "bin"
    (pgdata / "PG_VERSION").write_text("14\n")
    with pytest.raises(PostgresMissing, match="PostgreSQL 14 cluster"):
        bindir(pgdata, root)
    with pytest.raises(PostgresMissing, match="scripts/setup"):
        bindir(pgdata, tmp_path / "none")


def test_unreachable_names_the_first_directory_the_user_cannot_search(tmp_path):
    closed = tmp_path / "closed"
    (closed / "inner").mkdir(parents=True)
    target = closed / "inner" / "data"  # need not exist yet
    os.chmod(closed, 0o711)
    above = unreachable(target, 4242, 4242)  # tmp_path's own parents may already be closed to others
    os.chmod(closed, 0o700)
    blocked = unreachable(target, 4242, 4242)
    assert blocked == (closed if above is None else above)
    assert unreachable(target, 0, 0) is None
    if os.geteuid() == 0 and above is None:  # the owner's and the group's bits count for them
        os.chown(closed, 4242, 4343)
        assert unreachable(target, 4242, 1) is None
        assert unreachable(target, 4343, 4343) == closed  # group bits of 0700: none
        os.chmod(closed, 0o710)
        assert unreachable(target, 4444, 1, {4343}) is None


def test_socket_dir_is_dropped_when_its_path_is_too_long(tmp_path):
    assert socket_dir(Path("/d"), 5432) == Path("/d/run")
    assert socket_dir(Path("/" + "x" * 100), 5432) is None


class _Listener:
    """One in-process TCP listener answering the first message with ``reply``."""

    def __init__(self, reply: bytes):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.reply = reply
        self.received = b""
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        conn, _ = self.sock.accept()
        with conn:
            self.received = conn.recv(1024)
            conn.sendall(self.reply)

    def close(self):
        self.thread.join(5)
        self.sock.close()


def _error(code: bytes) -> bytes:
    body = b"SFATAL\0C" + code + b"\0Mmessage\0\0"
    return b"E" + struct.pack("!i", 4 + len(body)) + body


@pytest.mark.parametrize("reply, expected", [
    (b"R" + struct.pack("!ii", 12, 10) + b"SCRAM-SHA-256\0\0", True),  # asks for a password: accepting
    (_error(b"28P01"), True),    # authentication failed: up all the same (as pg_isready)
    (_error(b"57P03"), False),   # the database system is starting up
    (_error(b"57P01"), False),   # shutting down
    (b"", False),
])
def test_healthy_reads_the_servers_answer_to_a_startup_message(reply, expected):
    listener = _Listener(reply)
    try:
        assert healthy("127.0.0.1", listener.port, timeout=2) is expected
    finally:
        listener.close()
    assert listener.received[4:8] == struct.pack("!i", 196608) and b"user\0logbus_health\0" in listener.received


def test_healthy_is_false_when_nothing_listens():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert healthy("127.0.0.1", port, timeout=1) is False


def test_options_make_paths_absolute():
    opts = options("rel/data", "127.0.0.1", "15432", "airflow", "airflow", "pw")
    assert opts.data_dir.is_absolute() and opts.password_file.is_absolute() and opts.port == 15432
    assert postgres.SERVER_USER == "postgres"


@pytest.mark.skipif(os.geteuid() != 0 or not installed_versions(), reason="as root with PostgreSQL installed")
def test_a_data_dir_the_postgres_user_cannot_reach_without_namespaces_is_refused_before_anything_starts(
        tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(postgres, "find_tools", lambda: "unshare not found (Debian package util-linux)")
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    code = main(["postgres", "--data-dir", str(closed / "data"), "--port", "1", "--password-file",
                 str(tmp_path / "pw")])
    err = capsys.readouterr().err
    assert code == 2 and "the postgres user cannot reach" in err and err.count("\n") == 1
    assert "unshare not found" in err and "chmod o+x" in err
    assert not (closed / "data").exists() and not (tmp_path / "pw").exists()

"""``logbus postgres``: a real PostgreSQL (Debian's ``postgresql`` package) in the foreground as Airflow's metadata
database, its cluster in ``--data-dir``.

The data directory ``D``:

- ``D/pgdata``  the cluster (PGDATA), made by ``initdb`` on the first start: into ``D/pgdata.initdb`` first, renamed
  when complete, so an initdb cut short is made again rather than taken for a cluster. UTF8, C locale.
  ``pg_hba.conf``: the server's own OS user over the unix socket (``peer``), everyone else over TCP with
  ``scram-sha-256`` only.
- ``D/run``     the unix socket (``.s.PGSQL.<port>``), so nothing needs /var/run/postgresql; none when that path
  would pass the kernel's 107 bytes (TCP only then).

Every start, before the server opens its TCP port, a single-user backend (``postgres --single``, no socket)
creates the role ``--user`` if missing, sets its password to the one in ``--password-file`` (the file is the truth:
a changed file changes the password) and creates ``--database`` owned by it if missing. So once the server
accepts TCP connections, Airflow can log in. The password goes to that backend on stdin, never in argv, the
environment or a log line (``log_min_error_statement = panic`` there). A missing password file is created with a
random password, mode 0600.

PostgreSQL refuses to run as root: as root, initdb, the single-user backend and the server run as the
``postgres`` system user that Debian's package creates (``D`` is chowned to it), otherwise as the current user.
When that user cannot search a directory above ``D`` (a checkout under /root, 0700; pytest's /tmp/pytest-of-root),
no permission of those directories is changed: each of those processes runs in a private mount namespace of its
own where ``D`` is bind-mounted on ``/run/logbus-postgres/<12 hex digits of sha256(D)>`` (a root-owned, 0755,
empty directory on the host), which it reaches, and is given the paths under that mount (``-D <mount>/pgdata``,
the socket in ``<mount>/run``: the same directories as ``D/pgdata`` and ``D/run``). The command is one exec chain
in one process, so the pid this process waits on and signals ends up being PostgreSQL itself::

    unshare --mount --propagation private -- sh -c '<mount --no-mtab --bind D M; cd M; exec>' ... \
        setpriv --reuid=postgres --regid=postgres --clear-groups --pdeathsig=INT -- \
        sh -c '<exit unless our parent is still logbus postgres; exec>' ... postgres -D M/pgdata ...

The mount exists only in that namespace (``--no-mtab``: nothing written to /run/mount either) and goes with its
last process; the host never sees it. Where namespaces or mounts are not permitted (a container without
CAP_SYS_ADMIN), ``D`` is refused in one line as before, with the reason.

The server is this process' child, in a process group of its own and with ``PR_SET_PDEATHSIG`` (set again after
the switch of user, which clears it): SIGTERM, SIGINT or SIGHUP to this process is passed on as SIGINT,
PostgreSQL's fast shutdown (rolls back the open transactions and disconnects Airflow's pooled connections, which a
smart shutdown would wait for forever); a second one as SIGQUIT (immediate). It exits with the server's exit code.

``logbus postgres-url`` prints the SQLAlchemy URL with the password read from the file: Airflow runs it through
``AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD`` (``airflow_env``), so the password is in no environment or config file.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import re
import secrets
import shlex
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

INSTALL_ROOT = Path("/usr/lib/postgresql")
SERVER_USER = "postgres"         # the system user of Debian's package, used when we are root
PGDATA, PGDATA_NEW, SOCKET_DIR = "pgdata", "pgdata.initdb", "run"
SOCKET_PATH_MAX = 107            # sun_path less its NUL
IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]{0,62}")  # a role or database name used unquoted by Airflow's URL
PR_SET_PDEATHSIG = 1
MOUNT_BASE = Path("/run/logbus-postgres")  # as root, where a D the postgres user cannot reach is bind-mounted
TOOL_PATH = "/usr/bin:/bin:/usr/sbin:/sbin"
SHELL = "/bin/sh"
# run by sh as root inside the new mount namespace: $1 mount, $2 D, $3 the mount point, then the rest of the chain
MOUNT_SCRIPT = ('mount=$1 source=$2 target=$3; shift 3; '
                '"$mount" --no-mtab --bind "$source" "$target" || exit 125; cd "$target" || exit 125; exec "$@"')
# run by sh as the postgres user, after setpriv set the parent-death signal again: $0 is logbus postgres' pid; if
# it died before that, no signal will come, so stop here instead of starting an orphan
PARENT_SCRIPT = '[ "$PPID" = "$0" ] || exit 1; exec "$@"'
HBA = """\
# written by logbus postgres at initdb
# TYPE  DATABASE  USER  ADDRESS  METHOD
local   all       all            peer
host    all       all   all      scram-sha-256
"""
# Airflow's SQLAlchemy pool per process (scheduler, dag-processor, api-server workers, triggerer, db migrate):
# at most pool_size + max_overflow connections each, well under PostgreSQL's max_connections of 100
POOL_SIZE, MAX_OVERFLOW, POOL_RECYCLE_S = 3, 5, 1800


class PostgresError(ValueError):
    """Bad arguments or a data directory we cannot use: one line for the operator (exit 2)."""


class PostgresMissing(OSError):
    """PostgreSQL's binaries or its system user are not installed (exit 1)."""


@dataclass(frozen=True)
class Options:
    data_dir: Path
    host: str
    port: int
    database: str
    user: str
    password_file: Path


def options(data_dir: str, host: str, port: str | int, database: str, user: str, password_file: str) -> Options:
    """Checked arguments of ``logbus postgres``; PostgresError on anything PostgreSQL would refuse."""
    if not data_dir:
        raise PostgresError("--data-dir must not be empty")
    if not host or any(c.isspace() or c in ",'\"\\" for c in host):
        raise PostgresError(f"--host must be one address or host name (listen_addresses), not {host!r}")
    try:
        number = int(str(port).strip())
    except ValueError:
        raise PostgresError(f"--port must be a number from 1 to 65535, not {port!r}") from None
    if not 1 <= number <= 65535:
        raise PostgresError(f"--port must be from 1 to 65535, not {number}")
    for flag, name in (("--database", database), ("--user", user)):
        if not IDENTIFIER.fullmatch(name or ""):
            raise PostgresError(f"{flag} must be 1-63 of a-z, 0-9 and _, not starting with a digit: {name!r}")
    if user.startswith("pg_"):
        raise PostgresError(f"--user {user!r}: names starting with pg_ are PostgreSQL's own")
    if database in ("postgres", "template0", "template1"):
        raise PostgresError(f"--database {database!r} is one of PostgreSQL's own databases")
    if not password_file:
        raise PostgresError("--password-file must not be empty")
    return Options(Path(data_dir).absolute(), host, number, database, user, Path(password_file).absolute())


# -- the password file ------------------------------------------------------------------------------------------


def read_password(path: str | Path) -> str:
    """The password in ``path``: its first line without the line end. PostgresError if unreadable or unusable."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise PostgresError(f"cannot read the password file {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise PostgresError(f"the password file {path} is not UTF-8 text") from None
    lines = text.splitlines()
    password = lines[0] if lines else ""
    if not password or any(line for line in lines[1:]):
        raise PostgresError(f"the password file {path} must hold one non-empty line")
    if any(ord(c) < 32 or ord(c) == 127 for c in password):
        raise PostgresError(f"the password in {path} has control characters")
    return password


def ensure_password_file(path: Path) -> str:
    """The password in ``path``; a missing file is created first with a random password, mode 0600 (atomically:
    of two starts racing, both end with the one password that won)."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_name(f".{path.name}.{os.getpid()}.new")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(secrets.token_urlsafe(24) + "\n")
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(temp, path)  # fails if another start made it meanwhile: theirs stands
            except FileExistsError:
                pass
        finally:
            temp.unlink(missing_ok=True)
    return read_password(path)


def url(host: str, port: int, database: str, user: str, password: str, driver: str = "psycopg2") -> str:
    """SQLAlchemy's URL of the database (``postgresql+<driver>://``), the password percent-encoded."""
    return f"postgresql+{driver}://{quote(user, safe='')}:{quote(password, safe='')}@{host}:{port}/{database}"


# -- what Airflow and a health check need ------------------------------------------------------------------------


def airflow_env(host: str, port: int, database: str, user: str, password_file: str | Path, *,
                program: str = "logbus", pool_size: int = POOL_SIZE,
                max_overflow: int = MAX_OVERFLOW) -> dict[str, str]:
    """Airflow's settings for its metadata database on ``logbus postgres``. The URL comes from a command
    (``<program> postgres-url ...``, run by Airflow with shlex.split, no shell) that reads the password file, for
    the sync engine (psycopg2) and the async one (asyncpg), so no password is in the environment. ``program`` is
    the logbus CLI as the Airflow process finds it (on PATH in the image and under ``logbus up``)."""
    base = [program, "postgres-url", "--host", host, "--port", str(port), "--database", database, "--user", user,
            "--password-file", str(password_file)]
    return {"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD": shlex.join(base),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC_CMD": shlex.join([*base, "--driver", "asyncpg"]),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_POOL_ENABLED": "True",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_POOL_SIZE": str(pool_size),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_MAX_OVERFLOW": str(max_overflow),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_POOL_RECYCLE": str(POOL_RECYCLE_S),
            # a pooled connection that a restarted server closed is noticed at checkout, not at the query
            "AIRFLOW__DATABASE__SQL_ALCHEMY_POOL_PRE_PING": "True"}


def healthy(host: str, port: int, timeout: float = 3.0) -> bool:
    """Whether the server accepts connections, as ``pg_isready`` judges it, over the wire (no driver, no login):
    a startup message for a user that need not exist; an authentication request or any error but 57P0x
    (starting up, shutting down, in recovery) means it does. Since the role and the database are made before the
    TCP port opens (see the module's docstring), True also means Airflow can log in."""
    params = b"user\0logbus_health\0database\0postgres\0\0"
    startup = struct.pack("!ii", 8 + len(params), 196608) + params  # protocol 3.0
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(startup)
            head = _read(sock, 5)
            kind, length = head[:1], struct.unpack("!i", head[1:])[0]
            if kind not in (b"R", b"E") or not 4 <= length <= 8192:
                return False
            body = _read(sock, length - 4)  # all of it: closing on unread bytes would reset the connection,
            if kind == b"R":               # which the server logs; a plain close during authentication it does not
                return True
            fields = body.split(b"\0")
    except (OSError, ValueError, struct.error):
        return False
    code = next((f[1:] for f in fields if f[:1] == b"C"), b"")
    return bool(code) and not code.startswith(b"57P0")


def _read(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise ValueError("connection closed")
        data += chunk
    return data


# -- the installation --------------------------------------------------------------------------------------------


def installed_versions(root: Path = INSTALL_ROOT) -> list[int]:
    """Major versions with a server binary under ``root`` (``<root>/<major>/bin/postgres``), highest first."""
    found = []
    for entry in root.glob("*/bin/postgres") if root.is_dir() else []:
        version = entry.parent.parent.name
        if version.isdigit():
            found.append(int(version))
    return sorted(found, reverse=True)


def bindir(pgdata: Path, root: Path = INSTALL_ROOT) -> Path:
    """The binaries for this cluster: those of its major version (``PG_VERSION``) if it has one, else the highest
    installed. PostgresMissing when none fits."""
    versions = installed_versions(root)
    if not versions:
        raise PostgresMissing(f"PostgreSQL is not installed (no {root}/*/bin/postgres): run `bash scripts/setup` "
                              "(Debian package postgresql)")
    try:
        wanted = int((pgdata / "PG_VERSION").read_text().strip())
    except (OSError, ValueError):
        return root / str(versions[0]) / "bin"
    if wanted not in versions:
        raise PostgresMissing(f"{pgdata} is a PostgreSQL {wanted} cluster but only {versions} are installed "
                              f"(install postgresql-{wanted}, or pg_upgrade the cluster)")
    return root / str(wanted) / "bin"


@dataclass(frozen=True)
class Account:
    """Who the server runs as: None for uid/gid means this process' own."""

    name: str
    uid: int | None = None
    gid: int | None = None


def account() -> Account:
    if os.geteuid() != 0:
        return Account(pwd.getpwuid(os.geteuid()).pw_name)
    try:
        entry = pwd.getpwnam(SERVER_USER)
    except KeyError:
        raise PostgresMissing(f"running as root needs the {SERVER_USER!r} system user, which Debian's postgresql "
                              "package creates: run `bash scripts/setup`") from None
    return Account(SERVER_USER, entry.pw_uid, entry.pw_gid)


def unreachable(path: Path, uid: int, gid: int, groups: set[int] | frozenset[int] = frozenset()) -> Path | None:
    """The first existing directory at or above ``path`` that ``uid`` cannot search (mode bits only), or None."""
    for directory in reversed([path, *path.parents]):
        try:
            st = directory.stat()
        except FileNotFoundError:
            break
        if uid == 0:
            continue
        if st.st_uid == uid:
            bit = stat.S_IXUSR
        elif st.st_gid == gid or st.st_gid in groups:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not st.st_mode & bit:
            return directory
    return None


def mount_point(data_dir: Path, base: Path | None = None) -> Path:
    """Where ``data_dir`` (absolute) is bind-mounted for the postgres user when it cannot reach it: one directory
    per data directory under ``base`` (MOUNT_BASE), named by the first 12 hex digits of the SHA-256 of its path.
    Never removed: an rmdir would take the mount away from a server running in its namespace."""
    return (base or MOUNT_BASE) / hashlib.sha256(str(data_dir).encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Tools:
    """util-linux's programs for the private mount namespace, as absolute paths."""

    unshare: str
    mount: str
    setpriv: str


def find_tools(path: str | None = None) -> Tools | str:
    """The namespace tools (on ``path``, TOOL_PATH), or a one-line reason why there are none."""
    found = {name: shutil.which(name, path=path or TOOL_PATH) for name in ("unshare", "mount", "setpriv")}
    missing = [name for name, where in found.items() if where is None]
    if missing:
        return f"{', '.join(missing)} not found (Debian package util-linux)"
    return Tools(**found)


def namespace_command(argv: list[str], source: Path, target: Path, uid: int, gid: int, parent: int,
                      tools: Tools) -> list[str]:
    """``argv`` run as ``uid``:``gid`` (no supplementary groups) in a new private mount namespace where ``source``
    is bind-mounted on ``target``, its working directory ``target``. One process execs from one program to the
    next (unshare, sh, setpriv, sh, ``argv[0]``), so its pid is in the end ``argv[0]``'s, which gets the signals
    sent to that pid, and its exit code is ``argv[0]``'s; 125 if the mount failed. As the user it has SIGINT as
    its parent-death signal, and it stops unless its parent is still ``parent``."""
    return [tools.unshare, "--mount", "--propagation", "private", "--",
            SHELL, "-c", MOUNT_SCRIPT, "logbus-postgres-mount", tools.mount, str(source), str(target),
            tools.setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--pdeathsig=INT", "--",
            SHELL, "-c", PARENT_SCRIPT, str(parent), *argv]


def probe_command(source: Path, target: Path, tools: Tools) -> list[str]:
    """A bind mount of ``source`` on ``target`` in a throwaway private mount namespace: whether we may."""
    return [tools.unshare, "--mount", "--propagation", "private", "--", tools.mount, "--no-mtab", "--bind",
            str(source), str(target)]


def socket_dir(data_dir: Path, port: int) -> Path | None:
    """``D/run`` unless its socket's path would be too long for the kernel."""
    directory = data_dir / SOCKET_DIR
    return directory if len(str(directory / f".s.PGSQL.{port}").encode()) <= SOCKET_PATH_MAX else None


def server_command(bin_dir: Path, pgdata: Path, opts: Options, sockets: Path | None) -> list[str]:
    return [str(bin_dir / "postgres"), "-D", str(pgdata), "-c", f"listen_addresses={opts.host}",
            "-c", f"port={opts.port}", "-c", f"unix_socket_directories={sockets or ''}",
            "-c", "password_encryption=scram-sha-256"]


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def bootstrap_sql(database: str, user: str, password: str) -> str:
    """The single-user backend's input (one statement a line): the role with this password, then two marker
    rows saying what exists."""
    if "\n" in password or "\r" in password:
        raise PostgresError("the password must be one line")
    role = f'"{user}"'
    return ("SET log_min_error_statement = panic\n"  # an error must not log the statement with the password
            f"DO $logbus$ BEGIN IF EXISTS (SELECT FROM pg_roles WHERE rolname = {_literal(user)}) "
            f"THEN ALTER ROLE {role} LOGIN PASSWORD {_literal(password)}; "
            f"ELSE CREATE ROLE {role} LOGIN PASSWORD {_literal(password)}; END IF; END $logbus$\n"
            f"SELECT 'logbus-role' FROM pg_roles WHERE rolname = {_literal(user)} AND rolcanlogin\n"
            f"SELECT 'logbus-database' FROM pg_database WHERE datname = {_literal(database)}\n")


def create_database_sql(database: str, user: str) -> str:
    return (f'CREATE DATABASE "{database}" OWNER "{user}"\n'
            f"SELECT 'logbus-database' FROM pg_database WHERE datname = {_literal(database)}\n")


def markers(output: str) -> set[str]:
    """The marker rows a single-user backend printed (``1: ?column? = "logbus-role"``)."""
    return set(re.findall(r'= "(logbus-[a-z]+)"', output))


# -- running -----------------------------------------------------------------------------------------------------


class Server:
    """One ``logbus postgres`` run: prepare the data directory, then the server until a stop signal."""

    def __init__(self, opts: Options):
        self.opts = opts
        self.account = account()
        self.pgdata = opts.data_dir / PGDATA
        self.bin = bindir(self.pgdata)
        self.signals: list[int] = []
        self.child: subprocess.Popen | None = None
        self._libc = None
        if sys.platform.startswith("linux"):
            import ctypes

            self._libc = ctypes.CDLL(None, use_errno=True)
        self._parent = os.getpid()
        # set by prepare when the server's user cannot reach the data directory: where it sees it instead
        self.mount: Path | None = None
        self._tools: Tools | None = None

    def seen(self, path: Path) -> Path:
        """``path`` (in the data directory) as initdb and PostgreSQL see it: under the mount point if there is one."""
        return path if self.mount is None else self.mount / path.relative_to(self.opts.data_dir)

    def log(self, text: str) -> None:
        print(f"logbus postgres: {text}", flush=True)

    def _in_child(self) -> None:  # after the switch of user (which clears it): SIGINT to the child if we die
        if self._libc is not None:
            self._libc.prctl(PR_SET_PDEATHSIG, signal.SIGINT)
        if os.getppid() != self._parent:
            os.kill(os.getpid(), signal.SIGINT)

    def _popen(self, argv: list[str], **kwargs) -> subprocess.Popen:
        a = self.account
        ids = {} if a.uid is None else {"user": a.uid, "group": a.gid, "extra_groups": []}
        if self.mount is not None:  # root until the mount is made, then setpriv switches the user
            argv = namespace_command(argv, self.opts.data_dir, self.mount, a.uid, a.gid, self._parent, self._tools)
            ids = {}
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env.update(LC_ALL="C", LANG="C")
        try:
            return subprocess.Popen(argv, cwd=self.opts.data_dir, env=env, process_group=0,
                                    preexec_fn=self._in_child, **ids, **kwargs)
        except PermissionError as exc:
            raise PostgresError(f"{a.name} cannot start {argv[0]} in {self.opts.data_dir}: {exc.strerror}") from None

    def _run(self, argv: list[str], what: str, stdin: str | None = None) -> str:
        """A preparation step to its end (a stop signal waits for it: each takes a second or two)."""
        proc = self._popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        out, _ = proc.communicate(stdin)
        if proc.returncode != 0:
            raise RuntimeError(f"{what} failed ({_exit_text(proc.returncode)})")
        return out

    def _own(self, path: Path, mode: int) -> None:
        path.mkdir(parents=True, exist_ok=True)
        if self.account.uid is not None:
            os.chown(path, self.account.uid, self.account.gid)
        os.chmod(path, mode)

    def prepare(self) -> Path | None:
        """The data directory ready (initdb on a first start, the role and database made if missing); the socket
        directory or None."""
        opts, a = self.opts, self.account
        if opts.data_dir.exists() and not opts.data_dir.is_dir():
            raise PostgresError(f"--data-dir {opts.data_dir} is not a directory")
        if a.uid is not None:
            groups = {g.gr_gid for g in _groups_of(a.name)}
            blocked = unreachable(opts.data_dir, a.uid, a.gid, groups)
            if blocked is not None:
                self._use_namespace(blocked, groups)
        password = ensure_password_file(opts.password_file)
        self._own(opts.data_dir, 0o700)
        if not (self.pgdata / "PG_VERSION").exists():
            if self.pgdata.exists() and any(self.pgdata.iterdir()):
                raise PostgresError(f"{self.pgdata} holds files but no PostgreSQL cluster (no PG_VERSION)")
            self._initdb()
        sockets = socket_dir(opts.data_dir, opts.port)
        if sockets is None:
            self.log(f"no unix socket: {opts.data_dir / SOCKET_DIR} is too long a path for one (TCP only)")
        else:
            self._own(sockets, 0o700)
        self._clear_stale_pid()
        single = [str(self.bin / "postgres"), "--single", "-D", str(self.seen(self.pgdata)), "postgres"]
        found = markers(self._run(single, "setting up the role",
                                  bootstrap_sql(opts.database, opts.user, password)))
        if "logbus-role" not in found:
            raise RuntimeError(f"the role {opts.user} could not be made (see the errors above)")
        if "logbus-database" not in found:
            found = markers(self._run(single, "creating the database", create_database_sql(opts.database, opts.user)))
            if "logbus-database" not in found:
                raise RuntimeError(f"the database {opts.database} could not be made (see the errors above)")
            self.log(f"created database {opts.database} owned by {opts.user}")
        return sockets

    def _use_namespace(self, blocked: Path, groups: set[int]) -> None:
        """Make the mount point and check that a private mount namespace with a bind mount is permitted; else the
        one-line refusal of a data directory the server's user cannot reach, with the reason."""
        opts, a = self.opts, self.account
        target = mount_point(opts.data_dir)
        refusal = (f"the {a.name} user cannot reach {opts.data_dir}: {blocked} is not searchable by it, and a "
                   f"private mount namespace to bind-mount it on {target} is not possible here")
        hint = f"(chmod o+x {blocked}, or choose another --data-dir)"
        tools = find_tools()
        if isinstance(tools, str):
            raise PostgresError(f"{refusal}: {tools} {hint}")
        for directory in (target.parent, target):
            try:
                directory.mkdir(mode=0o755, exist_ok=True)
                st = directory.lstat()
            except OSError as exc:
                raise PostgresError(f"{refusal}: cannot make {directory}: {exc.strerror} {hint}") from None
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
                raise PostgresError(f"{refusal}: {directory} is not a directory of root's {hint}")
            os.chmod(directory, 0o755)
        if unreachable(target, a.uid, a.gid, groups) is not None:
            raise PostgresError(f"{refusal}: the {a.name} user cannot reach {target} either {hint}")
        probe = subprocess.run(probe_command(blocked, target, tools), stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env={"PATH": TOOL_PATH, "LC_ALL": "C"})
        if probe.returncode != 0:
            reason = " ".join(probe.stderr.split()) or _exit_text(probe.returncode)
            raise PostgresError(f"{refusal}: {reason} {hint}")
        self.mount, self._tools = target, tools
        self.log(f"the {a.name} user cannot reach {opts.data_dir} ({blocked} is not searchable by it): PostgreSQL "
                 f"sees it through a bind mount on {target} in a private mount namespace")

    def _initdb(self) -> None:
        new = self.opts.data_dir / PGDATA_NEW
        if new.exists():  # an initdb cut short: nothing but its own files
            shutil.rmtree(new)
        self._own(new, 0o700)
        self.log(f"initdb {self.pgdata} (PostgreSQL {self.bin.parent.name}, as {self.account.name})")
        self._run([str(self.bin / "initdb"), "-D", str(self.seen(new)), "--encoding=UTF8", "--locale=C",
                   "--auth-local=peer", "--auth-host=scram-sha-256", "--no-instructions"], "initdb")
        (new / "pg_hba.conf").write_text(HBA)
        if self.pgdata.exists():
            self.pgdata.rmdir()  # empty, checked by prepare
        new.rename(self.pgdata)

    def _clear_stale_pid(self) -> None:
        """A postmaster.pid whose pid now belongs to another program (a container restarted: pids repeat) would
        stop the server from starting; PostgreSQL's own check (shared memory in use) still guards a live one."""
        pidfile = self.pgdata / "postmaster.pid"
        try:
            pid = int(pidfile.read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            return  # gone: PostgreSQL sees that itself
        if comm != "postgres" and pid not in (os.getpid(), self._parent):
            self.log(f"removing stale {pidfile} (pid {pid} is now {comm!r})")
            pidfile.unlink(missing_ok=True)

    def _on_signal(self, signum: int, _frame) -> None:
        self.signals.append(signum)
        proc = self.child
        if proc is not None and proc.returncode is None:
            try:
                proc.send_signal(signal.SIGINT if len(self.signals) == 1 else signal.SIGQUIT)
            except ProcessLookupError:
                pass

    def run(self) -> int:
        handled = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
        previous = {sig: signal.signal(sig, self._on_signal) for sig in handled}
        try:
            sockets = self.prepare()
            if self.signals:
                self.log("stopped before the server started")
                return 0
            argv = server_command(self.bin, self.seen(self.pgdata), self.opts,
                                  None if sockets is None else self.seen(sockets))
            through = "" if self.mount is None else f" (mounted on {self.seen(self.pgdata)})"
            self.log(f"PostgreSQL {self.bin.parent.name} on {self.opts.host}:{self.opts.port} as {self.account.name}, "
                     f"database {self.opts.database} owned by {self.opts.user}, data in {self.pgdata}{through}")
            self.child = self._popen(argv, stdin=subprocess.DEVNULL)
            if self.signals:  # arrived between prepare and the start
                self.child.send_signal(signal.SIGINT)
            code = self.child.wait()
            if self.mount is not None and code == -signal.SIGINT and self.signals:
                # PostgreSQL takes SIGINT as fast shutdown and exits 0: it was a program before it in the chain
                self.log("stopped before the server started")
                return 0
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        self.log(f"server exited ({_exit_text(code)})")
        return code if code >= 0 else 128 - code


def _groups_of(name: str):
    import grp

    return [g for g in grp.getgrall() if name in g.gr_mem]


def _exit_text(code: int) -> str:
    from logbus.local import exit_text  # "code 1", or the signal's name ("SIGKILL"), as the supervisors say it

    return exit_text(code)


# -- the CLI -----------------------------------------------------------------------------------------------------


def _error(exc: Exception) -> None:
    print(f"logbus: postgres: {exc}", file=sys.stderr)


def _serve(args) -> int:
    try:
        opts = options(args.data_dir, args.host, args.port, args.database, args.user, args.password_file)
        return Server(opts).run()
    except PostgresError as exc:
        _error(exc)
        return 2
    except (PostgresMissing, RuntimeError, OSError) as exc:
        _error(exc)
        return 1


def _print_url(args) -> int:
    try:
        opts = options("-", args.host, args.port, args.database, args.user, args.password_file)
        # no line end: Airflow takes a _cmd's output as it is, a newline would end up in the database name
        print(url(opts.host, opts.port, opts.database, opts.user, read_password(opts.password_file), args.driver),
              end="", flush=True)
        return 0
    except PostgresError as exc:
        _error(exc)
        return 2


def _common(parser) -> None:
    parser.add_argument("--host", default="127.0.0.1",
                        help="the one address it listens on (listen_addresses; 0.0.0.0 in a container)")
    parser.add_argument("--port", default="5432")
    parser.add_argument("--database", default="airflow", help="the database Airflow uses (default airflow)")
    parser.add_argument("--user", default="airflow", help="its owner, Airflow's login (default airflow)")
    parser.add_argument("--password-file", required=True,
                        help="the user's password, one line; created with a random one (mode 0600) if missing")


def add_parsers(verbs) -> None:
    """``logbus postgres`` (the server) and ``logbus postgres-url`` (Airflow's connection URL)."""
    server = verbs.add_parser("postgres", help="run a real PostgreSQL (Debian's package) in the foreground: "
                                               "Airflow's metadata database")
    server.add_argument("--data-dir", required=True,
                        help="the cluster's directory (made by initdb if new); as root, chowned to the postgres "
                             "user, and if that user cannot search a directory above it, bind-mounted for it on "
                             f"{MOUNT_BASE}/<hash> in a private mount namespace (no permission changed)")
    _common(server)
    server.set_defaults(func=_serve)
    printer = verbs.add_parser("postgres-url", help="print the SQLAlchemy URL of a `logbus postgres` database, "
                                                    "password from its file (Airflow's sql_alchemy_conn_cmd)")
    _common(printer)
    printer.add_argument("--driver", default="psycopg2", choices=("psycopg2", "asyncpg"))
    printer.set_defaults(func=_print_url)

"""``logbus zookeeper``: a real ZooKeeper (Debian's ``zookeeper`` package, 3.8) in the foreground, with its data
under ``--data-dir``. The process execs java, so its pid is ZooKeeper's and SIGTERM stops it.

Standalone by default. With ``--server-id`` and ``--server`` it is one voting member of an ensemble, in
ZooKeeper's own terms: ``myid`` in the data directory, one ``server.N=host:quorumPort:electionPort;clientHost:
clientPort`` line per member (the 3.5+ syntax), ``initLimit``/``syncLimit`` and ``standaloneEnabled=false``.
Dynamic reconfiguration stays off (ZooKeeper's default), so zoo.cfg is the whole membership."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

JAR = "/usr/share/java/zookeeper.jar"
CONF_DIR = "/etc/zookeeper/conf"
SERVER_SYNTAX = "ID=HOST:QUORUM_PORT:ELECTION_PORT[;[CLIENT_HOST:]CLIENT_PORT]"
DEFAULT_INIT_LIMIT = 10  # ticks a follower may take to connect to and sync with the leader
DEFAULT_SYNC_LIMIT = 5  # ticks a follower may lag behind the leader before it is dropped


class ZooKeeperMissing(OSError):
    pass


class EnsembleError(ValueError):
    """Bad ensemble arguments: one line for the operator (the CLI exits with 2)."""


@dataclass(frozen=True)
class Server:
    """One ``server.N`` line of zoo.cfg."""

    id: int
    host: str
    quorum_port: int
    election_port: int
    client_host: str | None = None
    client_port: int | None = None

    def line(self) -> str:
        client = f";{self.client_host}:{self.client_port}" if self.client_port is not None else ""
        return f"server.{self.id}={self.host}:{self.quorum_port}:{self.election_port}{client}"


@dataclass(frozen=True)
class Ensemble:
    server_id: int
    servers: tuple[Server, ...]
    init_limit: int = DEFAULT_INIT_LIMIT
    sync_limit: int = DEFAULT_SYNC_LIMIT


def _number(text: str, what: str, low: int, high: int) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise EnsembleError(f"{what} must be a number from {low} to {high}, not {text!r}") from None
    if not low <= value <= high:
        raise EnsembleError(f"{what} must be from {low} to {high}, not {value}")
    return value


def _host(text: str, spec: str) -> str:
    host = text.strip()
    if not host or any(c in host for c in " =;:,/[]"):
        raise EnsembleError(f"bad host {host!r} in --server {spec!r} (expected {SERVER_SYNTAX})")
    return host


def parse_server(spec: str) -> Server:
    """``ID=HOST:QUORUM_PORT:ELECTION_PORT[;[CLIENT_HOST:]CLIENT_PORT]``, as in ZooKeeper's ``server.ID=...``."""
    ident, eq, rest = spec.partition("=")
    if not eq:
        raise EnsembleError(f"--server {spec!r}: expected {SERVER_SYNTAX}")
    peer, semi, client = rest.partition(";")
    parts = peer.split(":")
    if len(parts) != 3:
        raise EnsembleError(f"--server {spec!r}: expected {SERVER_SYNTAX} (no role, no IPv6 literal)")
    server_id = _number(ident.removeprefix("server."), f"server id in --server {spec!r}", 1, 255)
    host = _host(parts[0], spec)
    quorum = _number(parts[1], f"quorum port in --server {spec!r}", 1, 65535)
    election = _number(parts[2], f"election port in --server {spec!r}", 1, 65535)
    client_host = client_port = None
    if semi:
        chost, colon, cport = client.rpartition(":")
        client_host = _host(chost, spec) if colon else "0.0.0.0"  # ZooKeeper's default client address
        client_port = _number(cport, f"client port in --server {spec!r}", 1, 65535)
    return Server(server_id, host, quorum, election, client_host, client_port)


def ensemble(server_id: str | None, servers: list[str] | None, init_limit: str | None, sync_limit: str | None,
             host: str, port: int) -> Ensemble | None:
    """The ensemble the options describe, or None when none is given (standalone). ``servers`` are repeated
    ``--server`` values, each possibly a comma-separated list. Raises EnsembleError on anything ZooKeeper would
    refuse or that cannot form the ensemble intended."""
    if server_id is None and not servers and init_limit is None and sync_limit is None:
        return None
    if server_id is None:
        raise EnsembleError("an ensemble needs --server-id (this server's myid)")
    if not servers:
        raise EnsembleError(f"an ensemble needs --server {SERVER_SYNTAX} for every member, this one included")
    me = _number(server_id, "--server-id", 1, 255)
    parsed: dict[int, Server] = {}
    for spec in (s for value in servers for s in value.split(",")):
        if not spec.strip():
            continue
        server = parse_server(spec.strip())
        if server.id in parsed:
            raise EnsembleError(f"server id {server.id} given twice in --server")
        parsed[server.id] = server
    if me not in parsed:
        raise EnsembleError(f"--server-id {me} is not among the --server ids {sorted(parsed)}")
    own = parsed[me]
    if own.client_port is None:
        parsed[me] = own = Server(me, own.host, own.quorum_port, own.election_port, host, port)
    elif (own.client_host, own.client_port) != (host, port):
        raise EnsembleError(f"--server {me}=... gives client address {own.client_host}:{own.client_port} but "
                            f"--host/--port say {host}:{port}")
    used: dict[tuple[str, int], str] = {}
    for s in parsed.values():
        for address, role in (((s.host, s.quorum_port), "quorum"), ((s.host, s.election_port), "election"),
                              ((s.client_host, s.client_port), "client")):
            if address[1] is None:
                continue
            what = f"the {role} address of server {s.id}"
            if address in used:
                raise EnsembleError(f"{address[0]}:{address[1]} is both {used[address]} and {what}")
            used[address] = what
    return Ensemble(me, tuple(parsed[i] for i in sorted(parsed)),
                    _number(init_limit, "--init-limit", 1, 10_000) if init_limit is not None else DEFAULT_INIT_LIMIT,
                    _number(sync_limit, "--sync-limit", 1, 10_000) if sync_limit is not None else DEFAULT_SYNC_LIMIT)


def write_config(data_dir: Path, host: str, port: int, tick_time_ms: int, quorum: Ensemble | None = None) -> Path:
    data_dir.mkdir(parents=True, exist_ok=True)
    config = data_dir / "zoo.cfg"
    text = (f"tickTime={tick_time_ms}\n"
            f"dataDir={data_dir / 'data'}\n"
            f"clientPort={port}\n"
            f"clientPortAddress={host}\n"
            "maxClientCnxns=0\n"
            "admin.enableServer=false\n"  # no Jetty admin server on port 8080
            "4lw.commands.whitelist=ruok,stat,srvr,mntr\n"
            "autopurge.snapRetainCount=3\n"
            "autopurge.purgeInterval=1\n")
    if quorum is not None:
        write_myid(data_dir / "data", quorum.server_id)
        text += (f"initLimit={quorum.init_limit}\n"
                 f"syncLimit={quorum.sync_limit}\n"
                 "standaloneEnabled=false\n"  # the quorum stack even if the list shrinks to one member
                 + "".join(s.line() + "\n" for s in quorum.servers))
    config.write_text(text)
    return config


def write_myid(data: Path, server_id: int) -> None:
    """``myid`` in dataDir; a data directory that already belongs to another server id is refused."""
    data.mkdir(parents=True, exist_ok=True)
    myid = data / "myid"
    if myid.exists():
        existing = myid.read_text().strip()
        if existing != str(server_id):
            raise EnsembleError(f"{myid} says this data belongs to server {existing}, not --server-id {server_id}")
        return
    myid.write_text(f"{server_id}\n")


def command(config: Path, data_dir: Path) -> list[str]:
    java = shutil.which("java")
    if java is None or not os.path.exists(JAR):
        raise ZooKeeperMissing("ZooKeeper is not installed: run `bash scripts/setup` (Debian packages zookeeper "
                               "and default-jre-headless)")
    return [java, "-Xmx256m", f"-Dzookeeper.log.dir={data_dir}", "-Dzookeeper.root.logger=INFO,CONSOLE",
            "-cp", f"{CONF_DIR}:{JAR}", "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(config)]


def run(data_dir: str, host: str, port: int, tick_time_ms: int, quorum: Ensemble | None = None) -> int:
    directory = Path(data_dir).resolve()
    config = write_config(directory, host, port, tick_time_ms, quorum)
    argv = command(config, directory)
    if quorum is None:
        print(f"logbus: ZooKeeper on {host}:{port}, data in {directory}", flush=True)
    else:
        print(f"logbus: ZooKeeper server {quorum.server_id} of ensemble "
              f"{','.join(str(s.id) for s in quorum.servers)} on {host}:{port}, data in {directory}", flush=True)
    os.execv(argv[0], argv)
    return 1  # not reached

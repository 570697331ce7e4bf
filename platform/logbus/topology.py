"""The reference topology: one definition (``topology/default.json``) from which both ways to run it come —
local processes (``logbus up``, each "host" on its own loopback address) and ``docker-compose.yml`` (each host a
container). :func:`services` expands the definition into services with their commands, config files, health
checks and dependencies for a target: ``local`` (addresses 127.0.x.y, files under the state directory) or
``compose`` (container hostnames, configs under /etc/logbus, data under /var/lib/logbus).

A datacenter's ``zookeeper`` is a number of nodes (``true``: one): one node runs standalone, more form an
ensemble (``logbus zookeeper --server-id N --server ...``; quorum and election ports ``ports.zookeeper_quorum`` /
``ports.zookeeper_election``, 2888 / 3888 by default) on addresses of their own (local: .10, .11, ...; compose:
``<dc>-zookeeper1``, ...), and the datacenter's brokers list every node in ``zookeeper.connect``. A node is healthy
once it serves (``srvr`` says leader, follower or standalone): an ensemble member only with a quorum behind it.

A datacenter's ``wan_network`` (local target only, e.g. ``"127.0.3"``) plays the WAN link in front of it: its
brokers open a second listener ``WAN`` on port ``ports.broker_wan``, advertised at ``<wan_network>.<broker index>``,
and mirrors from other datacenters connect there. Whatever forwards those addresses to the brokers (a test's TCP
proxy that can cut the link) is not part of the topology.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from logbus import alertmanager, prometheus
from logbus import secure_topology as secure

REPO = Path(__file__).resolve().parents[2]
DEFAULT = REPO / "topology" / "default.json"
SECURE = REPO / "topology" / "secure.json"  # the same with SASL_SSL, ACLs, HTTPS and logins (logbus.secure_topology)
THREE_DC = REPO / "topology" / "three-dc.json"  # two live datacenters mirrored into one offline datacenter
# the last octet of each role's address inside its datacenter's 127.0.x network (brokers are .1, .2, ...)
# (an ensemble's ZooKeeper nodes are .10, .11, ...)
OCTETS = {"zookeeper": 10, "registry": 20, "mirror": 30, "counter": 31, "lag": 32, "audit": 40, "airflow": 50,
          "prometheus": 60, "alertmanager": 61, "frontend": 100, "postgres": 55, "spark-master": 70, "spark-worker": 70}

# a ZooKeeper ensemble's peer ports; each service's /metrics (a mirror per source: metrics + its index); Prometheus
PORT_DEFAULTS = {"zookeeper_quorum": 2888, "zookeeper_election": 3888, "metrics": 9404, "prometheus": 9090,
                 "alertmanager": 9093,
                 # the loads' engines (logbus.topology_engines): Spark's master RPC and the UIs, PostgreSQL
                 "spark_master": 7077, "spark_master_webui": 8085, "spark_worker_webui": 8086, "postgres": 5432}


REGISTRY_TRANSACTIONAL_ID = "schema-registry-leader"


class TopologyError(ValueError):
    pass


# the keys a topology may set, at the top and in a datacenter: any other is refused (a misspelt key would
# otherwise leave its default in place without a word)
TOP_KEYS = frozenset({"name", "audit_window_ms", "audit_grace_ms", "audit_emit_interval_ms", "load_schedule", "demo",
                      "ports", "published", "datacenters", "security", "log_format"})
DATACENTER_KEYS = frozenset({
    "network", "wan_network", "zookeeper", "brokers", "partitions", "broker_config",
    "registry", "registry_instances", "counter", "frontends", "audit_service", "prometheus", "alertmanager_webhooks",
    "mirror_from", "mirror_exactly_once", "mirror_transaction_interval_ms", "mirror_fetch_min_bytes",
    "mirror_fetch_wait_max_ms",
    "airflow", "airflow_database", "spark_workers", "spark_master", "spark_worker_cores", "spark_worker_memory"})


def check_keys(topo: dict) -> None:
    """:class:`TopologyError` naming the first key the topology does not know, at the top or in a datacenter."""
    unknown = sorted(set(topo) - TOP_KEYS)
    if unknown:
        raise TopologyError(f"unknown topology key {unknown[0]!r} (known: {', '.join(sorted(TOP_KEYS))})")
    for dc, spec in topo["datacenters"].items():
        unknown = sorted(set(spec) - DATACENTER_KEYS)
        if unknown:
            raise TopologyError(f"{dc}: unknown datacenter key {unknown[0]!r} "
                                f"(known: {', '.join(sorted(DATACENTER_KEYS))})")


@dataclass
class Service:
    name: str
    datacenter: str
    kind: str
    host: str                      # loopback address (local) or container hostname (compose)
    argv: list[str]                # logbus CLI arguments (`logbus airflow` runs Airflow's components)
    files: dict[str, str] = field(default_factory=dict)   # config files: name relative to the config dir
    env: dict[str, str] = field(default_factory=dict)
    depends_on: list[str] = field(default_factory=list)
    health: tuple = ("alive",)     # ("tcp", port) | ("http", port, path) | ("zookeeper", port) | ("postgres", port)
    #                                | ("airflow", port, path) | ("spark-worker", master host, master UI port)
    #                                | ("init", secrets dir) | ("alive",)
    port: int | None = None        # the port users connect to, if any
    url: str | None = None         # printed by `logbus up` (http services)
    program: str = "logbus"        # the command compose runs (the CLI)
    published: list[str] = field(default_factory=list)  # compose: "127.0.0.1:<host port>:<container port>"
    volumes: list[str] = field(default_factory=list)    # compose: more mounts, "<volume>:<path>[:ro]"


def load(path: str | Path | None = None) -> dict:
    path = Path(path) if path else DEFAULT
    try:
        topo = json.loads(path.read_text())
    except OSError as exc:
        raise TopologyError(f"cannot read topology {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise TopologyError(f"topology {path} is not valid JSON: {exc}") from None
    for key in ("datacenters", "ports"):
        if key not in topo:
            raise TopologyError(f"topology {path}: missing {key!r}")
    return topo


class _Names:
    """Addresses and paths for one target."""

    def __init__(self, topo: dict, target: str, state_dir: Path | None):
        self.topo, self.target = topo, target
        self.state = Path(state_dir).resolve() if state_dir else None

    def host(self, dc: str, role: str, index: int = 0) -> str:
        if self.target == "compose":
            return f"{dc}-{role}{index or ''}"
        network = self.topo["datacenters"][dc]["network"]
        octet = index if role == "broker" else OCTETS[role] + index
        return f"{network}.{octet}"

    def zookeeper(self, dc: str, index: int, count: int) -> tuple[str, str]:
        """(service name, host) of node ``index`` (1-based) of a datacenter's ``count`` ZooKeeper nodes."""
        name = f"{dc}-zookeeper{index if count > 1 else ''}"
        if self.target == "compose":
            return name, name
        return name, f"{self.topo['datacenters'][dc]['network']}.{OCTETS['zookeeper'] + index - 1}"

    def port(self, kind: str, dc: str | None = None) -> int:
        ports = {**PORT_DEFAULTS, **self.topo["ports"]}
        specific = ports.get(f"{dc}.{kind}") if dc else None
        return int(specific or ports[kind])

    def config_dir(self, service: str) -> str:
        return f"/etc/logbus/{service}" if self.target == "compose" else str(self.state / service)

    def data_dir(self, service: str) -> str:
        return f"/var/lib/logbus/{service}" if self.target == "compose" else str(self.state / service / "data")

    def secrets_dir(self) -> str:
        """Passwords, the CA and certificates of a secure topology (compose: the ``secrets`` volume)."""
        return "/etc/logbus/secrets" if self.target == "compose" else str(self.state / "secrets")

    def repo(self) -> str:
        return "/opt/logbus" if self.target == "compose" else str(REPO)

    def published(self, kind: str, dc: str, index: int = 1) -> int:
        """The host port a compose service publishes on 127.0.0.1 (``published`` in the topology: the first
        broker's port, the next brokers count up from it)."""
        table = self.topo.get("published", {})
        key = f"{dc}.{kind}"
        if key not in table:
            raise TopologyError(f"published: no host port for {key!r} (compose publishes it on 127.0.0.1)")
        return int(table[key]) + index - 1

    def published_list(self, kind: str, dc: str, container_port: int, index: int = 1) -> list[str]:
        if self.target != "compose":
            return []
        return [f"127.0.0.1:{self.published(kind, dc, index)}:{container_port}"]


def _zookeeper_count(dc: str, spec: dict) -> int:
    value = spec.get("zookeeper", True)
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int) and 0 <= value <= 9:  # local addresses .10 to .18, below the registry's .20
        return value
    raise TopologyError(f"{dc}: zookeeper must be true, false or a number of nodes (0-9), not {value!r}")


def _registries(n: _Names, dc: str, spec: dict) -> list[tuple[str, str]]:
    """(service name, host) of a datacenter's registry instances: ``registry_instances`` of them (default 1) for
    the primary, which elect their leader; one read-only follower elsewhere. The first is ``<dc>-registry``."""
    if not spec.get("registry"):
        return []
    count = spec.get("registry_instances", 1) if spec.get("registry") == "primary" else 1
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= 9:
        raise TopologyError(f"{dc}: registry_instances must be a number from 1 to 9, not {count!r}")
    out = []
    for k in range(count):
        name = f"{dc}-registry{k + 1 if k else ''}"
        out.append((name, name if n.target == "compose" else
                    f"{n.topo['datacenters'][dc]['network']}.{OCTETS['registry'] + k}"))
    return out


def mirror_fetch_wait(spec: dict) -> dict:
    """The fetch settings of a mirror on the whole-batch path (PLAINTEXT clusters): a fetch waits for 256 KB or
    100 ms, so light traffic is copied in fewer, larger cycles (fewer Produce requests offline, and fewer follower
    fetches woken). Secured clusters take librdkafka's record path, which keeps librdkafka's own defaults."""
    return {"fetch.min.bytes": spec.get("mirror_fetch_min_bytes", 262144),
            "fetch.wait.max.ms": spec.get("mirror_fetch_wait_max_ms", 100)}


def _mirror_group(dc: str, source: str, sources: list[str]) -> str:
    """The consumer group of ``dc``'s mirror of ``source``: ``mirror-<dc>``, or ``mirror-<dc>-<source>`` when
    ``dc`` mirrors several datacenters. The exactly-once mirror commits the source offsets under this name on the
    *target*, so two sources must never share one (their partitions' offsets would overwrite each other)."""
    return f"mirror-{dc}" if len(sources) <= 1 else f"mirror-{dc}-{source}"


def _props(values: dict) -> str:
    return "".join(f"{k}={v}\n" for k, v in values.items())


def services(topo: dict, target: str = "local", state_dir: Path | None = None) -> list[Service]:
    if target not in ("local", "compose"):
        raise TopologyError(f"unknown target {target!r}")
    check_keys(topo)
    n = _Names(topo, target, state_dir)
    out: list[Service] = []
    dcs = topo["datacenters"]
    window = int(topo.get("audit_window_ms", 60000))
    bootstrap = {dc: ",".join(f"{n.host(dc, 'broker', i)}:{n.port('broker', dc)}"
                              for i in range(1, int(spec.get("brokers", 1)) + 1)) for dc, spec in dcs.items()}
    wan = {dc: spec["wan_network"] for dc, spec in dcs.items() if spec.get("wan_network")}
    if wan and target != "local":
        raise TopologyError(f"{next(iter(wan))}: wan_network is for local topologies (a test's WAN link)")
    # what other datacenters' mirrors connect to: the WAN addresses where there are some
    remote = {dc: ",".join(f"{wan[dc]}.{i}:{n.port('broker_wan', dc)}"
                           for i in range(1, int(dcs[dc].get("brokers", 1)) + 1)) if dc in wan else bootstrap[dc]
              for dc in dcs}
    primary = next((dc for dc, spec in dcs.items() if spec.get("registry") == "primary"), None)
    try:
        sec = secure.enabled(topo)
    except ValueError as exc:
        raise TopologyError(str(exc)) from None
    scheme = "https" if sec else "http"
    secrets = n.secrets_dir() if sec else None
    # every writable instance of the primary datacenter (clients fail over among them; writes reach the leader)
    registry_url = (",".join(f"{scheme}://{host}:{n.port('registry', primary)}"
                             for _, host in _registries(n, primary, dcs[primary])) if primary else None)
    def client(principal: str, prefix: str = "") -> dict:  # a Kafka client's security settings, if any
        return secure.client_props(secrets, principal, prefix) if sec else {}

    def registry_client(principal: str) -> dict:  # a registry client's credentials, if any
        return secure.registry_client_props(secrets, principal) if sec else {}

    scrape: dict[str, list[tuple[str, dict]]] = {}  # Prometheus' targets: job -> [(host:port, labels)]

    def metrics_listener(job: str, dc: str, host: str, offset: int = 0) -> str:
        port = n.port("metrics", dc) + offset
        scrape.setdefault(job, []).append((f"{host}:{port}", {"datacenter": dc}))
        return f"http://{'0.0.0.0' if target == 'compose' else host}:{port}"

    init = []  # a secure topology's security-init service: what the brokers (and so everything) wait for
    if sec:
        init = ["security-init"]
    for dc, spec in dcs.items():
        count = _zookeeper_count(dc, spec)
        zookeepers = [n.zookeeper(dc, i, count) for i in range(1, max(count, 1) + 1)]
        zk_port = n.port("zookeeper", dc)
        zk = ",".join(f"{host}:{zk_port}" for _, host in zookeepers)  # every node: clients fail over among them
        members = ",".join(f"{i}={host}:{n.port('zookeeper_quorum', dc)}:{n.port('zookeeper_election', dc)}"
                           for i, (_, host) in enumerate(zookeepers, 1))
        for i, (zk_name, zk_host) in enumerate(zookeepers[:count], 1):
            argv = ["zookeeper", "--data-dir", n.data_dir(zk_name), "--host",
                    "0.0.0.0" if target == "compose" else zk_host, "--port", str(zk_port)]
            if count > 1:
                argv += ["--server-id", str(i), "--server", members]
            out.append(Service(zk_name, dc, "zookeeper", zk_host, argv, health=("zookeeper", zk_port), port=zk_port))
        brokers = int(spec.get("brokers", 1))
        for i in range(1, brokers + 1):
            name = f"{dc}-broker{i}"
            host = n.host(dc, "broker", i)
            listen = "0.0.0.0" if target == "compose" else host
            port = n.port("broker", dc)
            if target == "compose":  # containers talk on INTERNAL; the host reaches EXTERNAL, published on loopback
                external = n.port("broker_external", dc)
                listeners = {"listeners": f"INTERNAL://{listen}:{port},EXTERNAL://{listen}:{external}",
                             "advertised.listeners": f"INTERNAL://{host}:{port},"
                                                     f"EXTERNAL://127.0.0.1:{n.published('broker', dc, i)}",
                             "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
                             "inter.broker.listener.name": "INTERNAL"}
            elif dc in wan:  # the brokers' own datacenter on PLAINTEXT, other datacenters through the WAN
                wan_port = n.port("broker_wan", dc)
                listeners = {"listeners": f"PLAINTEXT://{listen}:{port},WAN://{listen}:{wan_port}",
                             "advertised.listeners": f"PLAINTEXT://{host}:{port},WAN://{wan[dc]}.{i}:{wan_port}",
                             "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,WAN:PLAINTEXT",
                             "inter.broker.listener.name": "PLAINTEXT"}
            else:
                listeners = {"listeners": f"PLAINTEXT://{listen}:{port}",
                             "advertised.listeners": f"PLAINTEXT://{host}:{port}"}
            if sec:  # the same listener names (PLAINTEXT renamed SASL_SSL), every one SASL_SSL, the ACL authorizer
                listeners = {k: v.replace("PLAINTEXT", "SASL_SSL") for k, v in listeners.items()
                             if k != "listener.security.protocol.map"}
                names = [item.split("://")[0] for item in listeners["listeners"].split(",")]
                listeners.update(secure.broker_props(secrets, name, names, listeners.get("inter.broker.listener.name",
                                                                                       names[0]),
                                                     authorizer=sec.get("authorizer", True)))
            config = {"broker.id": i, **listeners, "log.dirs": n.data_dir(name), "zookeeper.connect": f"{zk}/{dc}",
                      "num.partitions": spec.get("partitions", 3),
                      "default.replication.factor": min(3, brokers), "min.insync.replicas": min(2, brokers),
                      # transactions (the exactly-once mirror, the registry leaders' fencing) on 2-broker clusters too
                      "transaction.state.log.replication.factor": min(3, brokers),
                      "transaction.state.log.min.isr": min(2, brokers),
                      "group.initial.rebalance.delay.ms": 0, "zookeeper.session.timeout.ms": 6000,
                      "metrics.listener": metrics_listener("broker", dc, host), **spec.get("broker_config", {})}
            out.append(Service(name, dc, "broker", host, ["broker", f"{n.config_dir(name)}/server.properties"],
                               files={"server.properties": _props(config)},
                               depends_on=[zk_name for zk_name, _ in zookeepers] + init,
                               health=("tcp", port), port=port,
                               published=n.published_list("broker", dc, external, i) if target == "compose"
                               else []))
        broker_names = [f"{dc}-broker{i}" for i in range(1, brokers + 1)]
        role = spec.get("registry")
        for k, (name, host) in enumerate(_registries(n, dc, spec)):
            port = n.port("registry", dc)
            store_dc = dc if role == "primary" else primary  # a read-only follower reads the primary's _schemas
            config = {"listeners": f"{scheme}://{'0.0.0.0' if target == 'compose' else host}:{port}",
                      **client("registry" if role == "primary" else f"registry-{dc}", "kafkastore."),
                      **(secure.registry_server_props(secrets, name) if sec else {}),
                      "kafkastore.bootstrap.servers": bootstrap[store_dc],
                      "kafkastore.topic.replication.factor": min(3, int(dcs[store_dc].get("brokers", 1))),
                      "mode": "READWRITE" if role == "primary" else "READONLY", "host.name": host,
                      # a newly elected leader fences the one before (a paused leader cannot write again)
                      **({"kafkastore.transactional.id": REGISTRY_TRANSACTIONAL_ID} if role == "primary" else {}),
                      "metrics.listener": metrics_listener("registry", dc, host)}
            deps = [f"{store_dc}-broker{i}" for i in range(1, int(dcs[store_dc].get("brokers", 1)) + 1)]
            if role != "primary":
                deps.append(f"{primary}-registry")
            published = n.published_list(f"registry{k + 1}" if k else "registry", dc, port)
            out.append(Service(name, dc, "registry", host, ["schema-registry",
                                                             f"{n.config_dir(name)}/registry.properties"],
                               files={"registry.properties": _props(config)}, depends_on=deps,
                               health=(scheme, port, "/subjects"), port=port, url=f"{scheme}://{host}:{port}",
                               published=published))
        sources = spec.get("mirror_from", [])
        for index, source in enumerate(sources):
            if source not in dcs:
                raise TopologyError(f"{dc}: mirror_from names an unknown datacenter {source!r}")
            name = f"{dc}-mirror-{source}"
            out.append(Service(name, dc, "mirror", n.host(dc, "mirror"), [
                "mirror", "--consumer.config", f"{n.config_dir(name)}/consumer.properties",
                "--producer.config", f"{n.config_dir(name)}/producer.properties", "--whitelist", ".*",
                "--source-name", source, "--stats-file", f"{n.data_dir(name)}/stats.json",
                "--metrics-listener", metrics_listener("mirror", dc, n.host(dc, "mirror"), index),
                # exactly-once: a transaction per 500 ms at most (the audit's grace is far longer; the brokers' cost
                # of transactions falls with their number)
                *(["--exactly-once", "--transaction-interval-ms", str(spec.get("mirror_transaction_interval_ms", 500))]
                  if spec.get("mirror_exactly_once") else [])],
                # a crashed mirror's partitions are reassigned after its session times out: 10 s, not 45
                files={"consumer.properties": _props({"bootstrap.servers": remote[source],
                                                      "group.id": _mirror_group(dc, source, sources),
                                                      "session.timeout.ms": 10000,
                                                      **({} if sec else mirror_fetch_wait(spec)),
                                                      **client(f"mirror-{dc}")}),
                       "producer.properties": _props({"bootstrap.servers": bootstrap[dc], **client(f"mirror-{dc}")})},
                depends_on=broker_names + [f"{source}-broker{i}"
                                           for i in range(1, int(dcs[source].get("brokers", 1)) + 1)]))
        if any(s.get("prometheus") for s in dcs.values()):
            # every consumer group's lag (the exactly-once mirror's group holds the source's offsets: left out)
            name, host = f"{dc}-lag-exporter", n.host(dc, "lag")
            exclude = ("|".join(_mirror_group(dc, source, spec["mirror_from"]) for source in spec["mirror_from"])
                       if spec.get("mirror_exactly_once") and spec.get("mirror_from") else None)
            secured = ["--command-config", f"{n.config_dir(name)}/client.properties"] if sec else []
            out.append(Service(name, dc, "lag", host, [
                "lag-exporter", "--bootstrap-server", bootstrap[dc],
                "--metrics-listener", metrics_listener("lag", dc, host),
                *(["--exclude-groups", exclude] if exclude else []), *secured],
                files={"client.properties": _props(client("monitor"))} if sec else {}, depends_on=broker_names))
        if spec.get("counter") and registry_url:
            name = f"{dc}-audit-counter"
            out.append(Service(name, dc, "counter", n.host(dc, "counter"), [
                "audit-counter", "--tier", dc, "--consumer.config", f"{n.config_dir(name)}/consumer.properties",
                "--whitelist", ".*", "--schema-registry-url", registry_url, "--window-ms", str(window),
                "--emit-interval-ms", str(topo.get("audit_emit_interval_ms", 5000)),
                "--metrics-listener", metrics_listener("counter", dc, n.host(dc, "counter"))],
                files={"consumer.properties": _props({"bootstrap.servers": bootstrap[dc], **client(f"counter-{dc}"),
                                                      **registry_client(f"counter-{dc}")})},
                depends_on=broker_names + [f"{primary}-registry"]))
        for i in range(1, int(spec.get("frontends", 0)) + 1):
            name = f"{dc}-frontend{i}"
            demo = topo.get("demo", {})
            secured = ["--command-config", f"{n.config_dir(name)}/client.properties"] if sec else []
            out.append(Service(name, dc, "frontend", n.host(dc, "frontend", i), [
                "demo-traffic", "--bootstrap-server", bootstrap[dc], "--schema-registry-url", registry_url,
                "--rate", str(demo.get("rate", 100)), "--host-name", name, "--window-ms", str(window), *secured],
                files={"client.properties": _props({**client("frontend"), **registry_client("frontend")})}
                if sec else {},
                depends_on=broker_names + [f"{primary}-registry"]))
    grace = int(topo.get("audit_grace_ms", 2 * window))
    audit_clusters = {dc: bootstrap[dc] for dc, spec in dcs.items() if spec.get("counter")}
    tiers = ",".join(audit_clusters)
    for dc, spec in dcs.items():
        if spec.get("audit_service"):
            name = f"{dc}-audit-service"
            host, port = n.host(dc, "audit"), n.port("audit", dc)
            config = {"listeners": f"{scheme}://{'0.0.0.0' if target == 'compose' else host}:{port}",
                      **client("audit"), **registry_client("audit"),
                      **(secure.audit_server_props(secrets, name) if sec else {}),
                      "schema.registry.url": registry_url, "audit.tiers": tiers, "audit.grace.ms": grace,
                      **{f"audit.cluster.{c}.bootstrap.servers": b for c, b in audit_clusters.items()}}
            scrape.setdefault("audit", []).append((f"{host}:{port}", {"datacenter": dc}))
            out.append(Service(name, dc, "audit", host, ["audit-service", f"{n.config_dir(name)}/audit.properties"],
                               files={"audit.properties": _props(config)},
                               depends_on=[f"{c}-broker1" for c in audit_clusters] + [f"{primary}-registry"],
                               health=(scheme, port, "/api/status"), port=port, url=f"{scheme}://{host}:{port}",
                               published=n.published_list("audit", dc, port)))
        if spec.get("airflow"):
            from logbus import topology_engines as engines

            name = f"{dc}-airflow"
            host, port = n.host(dc, "airflow"), n.port("airflow", dc)
            data = n.data_dir(name)
            cluster, spark_settings = engines.spark(n, dc, spec)  # a Spark standalone cluster, or local[2]
            database, database_env = engines.postgres(n, dc, spec)  # PostgreSQL, or Airflow's SQLite
            out.extend(cluster + database)
            load = {"bootstrap.servers": bootstrap[dc], "schema.registry.url": registry_url,
                    **client("loads"), **registry_client("loads"),
                    "warehouse.path": engines.warehouse_dir(n, dc, data), **spark_settings,
                    "audit.window.ms": window, "audit.grace.ms": grace, "audit.tiers": f"{tiers},warehouse",
                    **{f"audit.cluster.{c}.bootstrap.servers": b for c, b in audit_clusters.items()}}
            env = {"AIRFLOW_HOME": f"{data}/home", "AIRFLOW__CORE__DAGS_FOLDER": f"{n.repo()}/dags",
                   "AIRFLOW__CORE__PLUGINS_FOLDER": f"{n.repo()}/airflow_plugins",
                   "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
                   "AIRFLOW__CORE__EXECUTOR": "LocalExecutor", "AIRFLOW__CORE__PARALLELISM": "2",
                   # a task that stopped heartbeating is failed and retried after 60 s, not 300 ...
                   "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "60",
                   # ... and the tasks of a killed scheduler are reset and run again after 30 s, not 5 min
                   "AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": "30",
                   "AIRFLOW__API__HOST": "0.0.0.0" if target == "compose" else host, "AIRFLOW__API__PORT": str(port),
                   "AIRFLOW__API__BASE_URL": f"http://{'127.0.0.1' if target == 'compose' else host}:{port}",
                   "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
                   # local: `logbus up` writes it (random password); compose: Airflow generates it in the volume
                   "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE":
                       f"{data if target == 'compose' else n.config_dir(name)}/passwords.json",
                   "LOGBUS_LOAD_CONFIG": f"{n.config_dir(name)}/load.properties",
                   "LOGBUS_LOAD_SCHEDULE": topo.get("load_schedule", "@hourly"), **database_env}
            scrape.setdefault("loads", []).append((f"{host}:{port}", {"datacenter": dc}))  # the plugin's metrics
            # `logbus airflow`, not `airflow standalone`: it restarts any of Airflow's components that exits;
            # healthy only while the health endpoint says the metadata database and the scheduler are
            volumes = []
            if target == "compose":  # the database's password (read-only); the warehouse the executors write
                volumes += [f"{d.name}-data:/var/lib/logbus/{d.name}:ro" for d in database]
                if cluster:
                    volumes.append(f"{engines.WAREHOUSE_VOLUME}:/var/lib/logbus/{engines.WAREHOUSE_VOLUME}")
            out.append(Service(name, dc, "airflow", host, ["airflow"], files={"load.properties": _props(load)},
                               env=env, volumes=volumes,
                               depends_on=broker_names + [f"{primary}-registry"] + [s.name for s in cluster + database],
                               health=("airflow", port, "/api/v2/monitor/health"), port=port,
                               url=f"http://{host}:{port}", published=n.published_list("airflow", dc, port)))
    for dc, spec in dcs.items():
        if spec.get("prometheus"):
            manager = _alertmanager(n, dc, spec)
            out.append(manager)
            out.append(_prometheus(n, dc, scrape, secrets, [s.name for s in out if s.kind == "broker"], manager))
    if sec:
        out.append(_security_init(topo, n, secrets, out))
    log_format = topo.get("log_format")  # "json": every service logs one JSON object per line
    if log_format not in (None, "text", "json"):
        raise TopologyError(f"log_format must be text or json, not {log_format!r}")
    for s in out:  # a service's log lines name it (--log-format json's "service")
        s.env = {"LOGBUS_SERVICE": s.name, **({"LOGBUS_LOG_FORMAT": log_format} if log_format else {}), **s.env}
    names = {s.name for s in out}
    for s in out:
        missing = [d for d in s.depends_on if d not in names]
        if missing:
            raise TopologyError(f"{s.name} depends on {missing[0]}, which the topology does not define")
    return out


def _alertmanager(n: _Names, dc: str, spec: dict) -> Service:
    """Alertmanager beside Prometheus, receiving its alerts (logbus.alertmanager: grouping, the ``operators``
    receiver with the datacenter's ``alertmanager_webhooks``)."""
    name = f"{dc}-alertmanager"
    host, port = n.host(dc, "alertmanager"), n.port("alertmanager", dc)
    hooks = spec.get("alertmanager_webhooks", [])
    if not isinstance(hooks, list) or not all(isinstance(h, str) and h.startswith(("http://", "https://"))
                                              for h in hooks):
        raise TopologyError(f"{dc}: alertmanager_webhooks must be a list of http(s) URLs, not {hooks!r}")
    listen = f"{'0.0.0.0' if n.target == 'compose' else host}:{port}"
    published = n.published_list("alertmanager", dc, port)
    external = f"http://127.0.0.1:{n.published('alertmanager', dc)}" if published else f"http://{host}:{port}"
    return Service(name, dc, "alertmanager", host, ["alertmanager", "--config",
                                                    f"{n.config_dir(name)}/alertmanager.yml", "--data-dir",
                                                    n.data_dir(name), "--listen", listen, "--external-url", external],
                   files={"alertmanager.yml": alertmanager.config(hooks)}, health=("http", port, "/-/ready"),
                   port=port, url=f"http://{host}:{port}", published=published)


def _prometheus(n: _Names, dc: str, scrape: dict, secrets: str | None, brokers: list[str],
                manager: Service) -> Service:
    """Prometheus scraping every service's /metrics (each target labelled with its datacenter), with logbus'
    alert rules (config/prometheus/alerts.yml), sending firing alerts to the datacenter's Alertmanager (scraped
    too). The audit service's /metrics is served over its HTTPS in a secure topology (checked against the
    topology's CA); the other /metrics endpoints are plain HTTP."""
    name = f"{dc}-prometheus"
    host, port = n.host(dc, "prometheus"), n.port("prometheus", dc)
    schemes = {"audit": {"scheme": "https", "tls_config": {"ca_file": f"{secrets}/ca.pem"}}} if secrets else {}
    schemes["loads"] = {"metrics_path": "/logbus-metrics/metrics"}  # the logbus_audit Airflow plugin
    manager_address = f"{manager.host}:{manager.port}"
    config = prometheus.config({**scrape, "prometheus": [(f"{host}:{port}", {"datacenter": dc})],
                                "alertmanager": [(manager_address, {"datacenter": dc})]},
                               [f"{n.config_dir(name)}/alerts.yml"], schemes, alertmanagers=[manager_address])
    listen = f"{'0.0.0.0' if n.target == 'compose' else host}:{port}"
    return Service(name, dc, "prometheus", host, ["prometheus", "--config", f"{n.config_dir(name)}/prometheus.yml",
                                                  "--data-dir", n.data_dir(name), "--listen", listen],
                   files={"prometheus.yml": config, "alerts.yml": prometheus.RULES.read_text()},
                   depends_on=brokers + [manager.name], health=("http", port, "/-/ready"), port=port,
                   url=f"http://{host}:{port}", published=n.published_list("prometheus", dc, port))


def _security_init(topo: dict, n: _Names, secrets: str, svcs: list[Service]) -> Service:
    """The one-shot service that makes a secure topology's secrets and stores users and ACLs in ZooKeeper."""
    plan = secure.acl_plan(topo)
    certificates = {}
    for s in svcs:
        if s.kind in ("broker", "registry", "audit"):
            hosts = [s.host]
            if n.target == "compose":
                hosts += ["127.0.0.1", "localhost"]  # the published ports, reached from the host
            elif topo["datacenters"][s.datacenter].get("wan_network") and s.kind == "broker":
                hosts.append(f"{topo['datacenters'][s.datacenter]['wan_network']}.{s.name.rsplit('broker', 1)[1]}")
            certificates[s.name] = hosts
    zookeepers = {}
    for dc, spec in topo["datacenters"].items():
        count = _zookeeper_count(dc, spec)
        nodes = [n.zookeeper(dc, i, count)[1] for i in range(1, max(count, 1) + 1)]
        zookeepers[dc] = ",".join(f"{host}:{n.port('zookeeper', dc)}" for host in nodes) + f"/{dc}"
    spec = {"secrets_dir": secrets, "principals": secure.principals(plan), "certificates": certificates,
            "zookeepers": zookeepers, "acls": plan, "registry_users": secure.registry_users(plan)}
    name = "security-init"
    first = next(iter(topo["datacenters"]))
    return Service(name, first, "init", name if n.target == "compose" else "127.0.0.1",
                   ["security-init", f"{n.config_dir(name)}/plan.json"],
                   files={"plan.json": json.dumps(spec, indent=1) + "\n"},
                   depends_on=[s.name for s in svcs if s.kind == "zookeeper"], health=("init", secrets))


def command(service: Service, target: str = "local") -> list[str]:
    if target == "compose":
        return [service.program, *service.argv]
    return [sys.executable, "-m", "logbus.cli", *service.argv]

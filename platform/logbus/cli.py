"""The ``logbus`` command: one verb per service (``broker``, ``zookeeper``, ``topics``; the registry, mirror,
audit and loads issues add theirs). Errors are one line on stderr and a non-zero exit code."""

from __future__ import annotations

import argparse
import logging
import sys


def _broker(args: argparse.Namespace) -> int:
    from broker.config import BrokerConfig
    from broker.server import run

    config = BrokerConfig.load(args.config, args.override or [])
    run(config)
    return 0


def _zookeeper(args: argparse.Namespace) -> int:
    from logbus.zookeeper import EnsembleError, ensemble, run

    try:
        quorum = ensemble(args.server_id, args.server, args.init_limit, args.sync_limit, args.host, args.port)
        return run(args.data_dir, args.host, args.port, args.tick_time, quorum)
    except EnsembleError as exc:
        print(f"logbus: zookeeper: {exc}", file=sys.stderr)
        return 2


def _topics(args: argparse.Namespace) -> int:
    from logbus.admin import run, topics

    return run(topics, args)


def _configs(args: argparse.Namespace) -> int:
    from logbus import quota_configs
    from logbus.user_configs import run

    types, names = args.entity_type or [], args.entity_names or []
    if quota_configs.is_quota_change(args.add_config, args.delete_config, types) or (
            args.describe and args.bootstrap_server and (not names or "" in names)):
        return quota_configs.run(args, types, names)
    if args.describe and args.bootstrap_server and types == ["users"] and len(names) == 1:
        # kafka-configs' describe of a named user: its quotas, then its SCRAM credentials
        code = quota_configs.run(args, types, names)
        if code:
            return code
    if len(types) > 1 or len(names) > 1:
        print("logbus: configs: SCRAM credentials take one --entity-type users and one --entity-name",
              file=sys.stderr)
        return 2
    args.entity_type = types[0] if types else None
    args.entity_name = names[0] if names else None
    return run(args)


def _acls(args: argparse.Namespace) -> int:
    from logbus.acls import run

    return run(args)


def _consumer_groups(args: argparse.Namespace) -> int:
    from logbus.consumer_groups import run

    return run(args)


def _lag_exporter(args: argparse.Namespace) -> int:
    from logbus.lag_exporter import run

    return run(args)


def _prometheus(args: argparse.Namespace) -> int:
    from logbus.prometheus import run

    return run(args)


def _alertmanager(args: argparse.Namespace) -> int:
    from logbus.alertmanager import run

    return run(args)


def _certs(args: argparse.Namespace) -> int:
    from logbus.certs import run

    return run(args)


def _security_init(args: argparse.Namespace) -> int:
    from logbus.secure_topology import run_init

    return run_init(args.plan)


def _reassign(args: argparse.Namespace) -> int:
    from logbus.admin import reassign, run

    return run(reassign, args)


def _schema_registry(args: argparse.Namespace) -> int:
    from schema_registry.config import RegistryConfigError
    from schema_registry.service import run

    try:
        return run(args.config, args.override or [])
    except RegistryConfigError as exc:
        print(f"logbus: config error: {exc}", file=sys.stderr)
        return 2
    except (RuntimeError, TimeoutError) as exc:
        print(f"logbus: schema registry cannot start: {exc}", file=sys.stderr)
        return 1


def _mirror(args: argparse.Namespace) -> int:
    from mirror.cli import run

    return run(args)


def _mirror_translate(args: argparse.Namespace) -> int:
    from mirror.cli import translate

    return translate(args)


def _audit_counter(args: argparse.Namespace) -> int:
    import signal

    from audit.counter import TierCounter
    from mirror.cli import read_properties

    from settings import registry_client

    try:
        registry, consumer = registry_client.split(read_properties(args.consumer_config))
    except ValueError as exc:
        print(f"logbus: {exc}", file=sys.stderr)
        return 2
    from confluent_kafka import KafkaException

    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    try:
        counter = TierCounter(args.tier, consumer, args.whitelist,
                              registry_client.registry_conf(registry, args.schema_registry_url), args.window_ms,
                              args.emit_interval_ms, args.audit_bootstrap, args.reader)
    except (ValueError, KafkaException) as exc:  # a bad pattern or client setting: retrying cannot help
        reason = exc.args[0].str() if isinstance(exc, KafkaException) else str(exc)
        print(f"logbus: audit-counter config error: {reason}", file=sys.stderr)
        return 2
    from audit.metrics import counter_families
    from telemetry.exposition import MetricsServer

    try:
        metrics = MetricsServer(getattr(args, "metrics_listener", ""), lambda: counter_families(counter))
        metrics.start()
    except (ValueError, OSError) as exc:
        print(f"logbus: audit-counter config error: {exc}", file=sys.stderr)
        return 2
    try:
        counter.run(stop=lambda: bool(stopping))  # returns only once told to stop
    finally:
        metrics.stop()
    try:
        counter.emit()
    except Exception as exc:  # the last round stays unfinished: the next start replays it
        logging.getLogger("logbus").warning("last counts not published at shutdown: %s", exc)
    return 0


def _audit_service(args: argparse.Namespace) -> int:
    from audit.service import ServiceConfigError, run

    try:
        return run(args.config)
    except ServiceConfigError as exc:
        print(f"logbus: config error: {exc}", file=sys.stderr)
        return 2


def _load(args: argparse.Namespace) -> int:
    from logbus.loads import run_load

    return run_load(args.config)


def _demo_traffic(args: argparse.Namespace) -> int:
    from logbus.traffic import run
    from settings.properties import read_properties

    props = read_properties(args.command_config) if args.command_config else {}
    return run(args.bootstrap_server, args.schema_registry_url, args.rate, args.host_name, args.window_ms,
               args.seconds, props)


def _airflow(args: argparse.Namespace) -> int:
    from logbus.airflow_runner import run

    return run()


def _up(args: argparse.Namespace) -> int:
    from logbus.local import up

    return up(args.topology, args.state_dir)


def _status(args: argparse.Namespace) -> int:
    from logbus.local import status

    return status(args.state_dir, args.json)


def _down(args: argparse.Namespace) -> int:
    from logbus.local import down

    return down(args.state_dir)


def _supervise(args: argparse.Namespace) -> int:
    from logbus.local import supervise

    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not argv:
        print("logbus: supervise: no command after --", file=sys.stderr)
        return 2
    return supervise(args.state_dir, args.service, argv)


def _compose(args: argparse.Namespace) -> int:
    from logbus.compose import write

    return write(args.topology, args.output, args.config_dir)


def _demo(args: argparse.Namespace) -> int:
    from logbus.demo import run_demo

    return run_demo(args.state_dir, args.messages)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="logbus", description="The 2011 Kafka paper's log pipeline, runnable.")
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING (default INFO)")
    parser.add_argument("--log-format", choices=("text", "json"), default=None,
                        help="text (default) or json: one JSON object per line (default: $LOGBUS_LOG_FORMAT)")
    verbs = parser.add_subparsers(dest="verb", required=True)

    broker = verbs.add_parser("broker", help="run one Kafka-compatible broker in the foreground")
    broker.add_argument("config", help="Kafka-style properties file (broker.id, listeners, log.dirs, ...)")
    broker.add_argument("--override", action="append", metavar="KEY=VALUE", help="override a config key")
    broker.set_defaults(func=_broker)

    zk = verbs.add_parser("zookeeper", help="run a real ZooKeeper (Debian's package) in the foreground")
    zk.add_argument("--data-dir", required=True, help="where ZooKeeper keeps its snapshots and logs")
    zk.add_argument("--port", type=int, default=2181, help="client port (default 2181)")
    zk.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    zk.add_argument("--tick-time", type=int, default=2000, help="tickTime in ms (sessions: 2 to 20 ticks)")
    zk.add_argument("--server-id", metavar="N", help="ensemble: this server's id (1-255, written to myid); "
                                                     "with --server, else standalone")
    zk.add_argument("--server", action="append", metavar="ID=HOST:QUORUM_PORT:ELECTION_PORT[;[HOST:]CLIENT_PORT]",
                    help="ensemble: one member, this one included, as ZooKeeper's server.ID line (repeat it, or "
                         "separate members with commas)")
    zk.add_argument("--init-limit", metavar="TICKS", help="ensemble: initLimit (default 10)")
    zk.add_argument("--sync-limit", metavar="TICKS", help="ensemble: syncLimit (default 5)")
    zk.set_defaults(func=_zookeeper)

    topics = verbs.add_parser("topics", help="list, describe, create, alter or delete topics (as kafka-topics.sh)")
    actions = ["list", "describe", "create", "alter", "delete"]
    topics.add_argument("action", nargs="?", choices=actions, help="or kafka-topics.sh's --list, --alter, ...")
    topics.add_argument("--command-config", help="client properties (security.protocol, sasl.*, ssl.*)")
    flags = topics.add_mutually_exclusive_group()
    for name in actions:
        flags.add_argument(f"--{name}", dest="action_flag", action="store_const", const=name,
                           help=f"the same as the {name} action")
    topics.add_argument("--bootstrap-server", required=True, help="any broker, host:port")
    topics.add_argument("--topic")
    topics.add_argument("--partitions", type=int, default=-1,
                        help="create: default the broker's num.partitions; alter: the new partition count")
    topics.add_argument("--replication-factor", type=int, default=-1,
                        help="default: the broker's default.replication.factor")
    topics.add_argument("--config", action="append", metavar="KEY=VALUE", help="a topic config")
    topics.add_argument("--replica-assignment", metavar="B:B,B:B,...",
                        help="alter: every partition's replicas (kafka-topics.sh's form); the new ones are used")
    topics.set_defaults(func=_topics)

    configs = verbs.add_parser("configs", help="SCRAM credentials of users and client quotas (as kafka-configs.sh)")
    configs.add_argument("--zookeeper", help="host:port/chroot of the cluster (works before any broker runs)")
    configs.add_argument("--log-dir", help="instead of --zookeeper: a standalone broker's first log dir")
    configs.add_argument("--bootstrap-server", help="any broker, host:port (AlterUserScramCredentials)")
    configs.add_argument("--command-config", help="with --bootstrap-server: the client's properties file")
    configs.add_argument("--alter", action="store_true")
    configs.add_argument("--describe", action="store_true")
    configs.add_argument("--entity-type", required=True, action="append",
                         choices=["users", "topics", "brokers", "clients", "ips"],
                         help="users, clients, ips (quotas; users and clients together: a user's client id)")
    configs.add_argument("--entity-name", dest="entity_names", action="append")
    configs.add_argument("--entity-default", dest="entity_names", action="append_const", const="",
                         help="the default entity of the --entity-type in the same position (quotas)")
    configs.add_argument("--add-config", metavar="'SCRAM-SHA-512=[password=...]' or 'producer_byte_rate=N,...'")
    configs.add_argument("--delete-config", metavar="SCRAM-SHA-512 or producer_byte_rate,...")
    configs.set_defaults(func=_configs)

    from logbus import acls as acls_cli, certs as certs_cli, consumer_groups as groups_cli

    acls = verbs.add_parser("acls", help="add, remove or list ACLs (as kafka-acls.sh)")
    acls_cli.add_arguments(acls)
    acls.set_defaults(func=_acls)
    groups = verbs.add_parser("consumer-groups", help="list, describe or delete consumer groups, reset their offsets "
                                                      "(as kafka-consumer-groups.sh)")
    groups_cli.add_arguments(groups)
    groups.set_defaults(func=_consumer_groups)
    certs = verbs.add_parser("certs", help="make a private CA and the certificates of a secure topology")
    certs_cli.add_arguments(certs)
    certs.set_defaults(func=_certs)
    prom = verbs.add_parser("prometheus", help="run Prometheus (Debian's) with a logbus topology's configuration")
    prom.add_argument("--config", required=True, help="prometheus.yml (written by logbus up / logbus compose)")
    prom.add_argument("--data-dir", required=True, help="its time-series database")
    prom.add_argument("--listen", default="127.0.0.1:9090", help="HOST:PORT of its web UI and API")
    prom.add_argument("--retention", default="2d", help="how long samples are kept (--storage.tsdb.retention.time)")
    prom.set_defaults(func=_prometheus)
    alerts = verbs.add_parser("alertmanager", help="run Alertmanager (Debian's) with a logbus topology's configuration")
    alerts.add_argument("--config", required=True, help="alertmanager.yml (written by logbus up / logbus compose)")
    alerts.add_argument("--data-dir", required=True, help="its silences and notification log")
    alerts.add_argument("--listen", default="127.0.0.1:9093", help="HOST:PORT of its web UI and API")
    alerts.add_argument("--external-url", help="the URL operators reach it at (links in notifications)")
    alerts.set_defaults(func=_alertmanager)
    lag = verbs.add_parser("lag-exporter", help="serve every consumer group's lag as Prometheus metrics")
    lag.add_argument("--bootstrap-server", required=True)
    lag.add_argument("--command-config", help="client properties (security.protocol, sasl.*, ssl.*)")
    lag.add_argument("--metrics-listener", required=True, help="http://HOST:PORT (path /metrics)")
    lag.add_argument("--exclude-groups", help="regex of groups left out (offsets that are not this cluster's)")
    lag.set_defaults(func=_lag_exporter)

    security_init = verbs.add_parser("security-init", help="a secure topology's certificates, passwords, SCRAM "
                                     "users and ACLs (run by logbus up / compose before the brokers)")
    security_init.add_argument("plan", help="the plan.json the topology wrote")
    security_init.set_defaults(func=_security_init)

    reassign = verbs.add_parser("reassign-partitions", help="move partition replicas (Kafka's reassignment JSON)")
    where = reassign.add_mutually_exclusive_group(required=True)
    where.add_argument("--bootstrap-server", help="any broker: AlterPartitionReassignments through the controller")
    where.add_argument("--zookeeper", help="host:port/chroot of the cluster (the classic tool's way)")
    reassign.add_argument("--command-config", help="client properties (security.protocol, sasl.*, ssl.*)")
    reassign.add_argument("--plan", "--reassignment-json-file", dest="plan", required=True,
                          help='{"version":1,"partitions":[{"topic","partition","replicas"}]}')
    action = reassign.add_mutually_exclusive_group()
    action.add_argument("--execute", action="store_true", help="start the reassignment (the default)")
    action.add_argument("--verify", action="store_true", help="report progress instead of starting")
    action.add_argument("--cancel", action="store_true", help="cancel it (--bootstrap-server only)")
    reassign.set_defaults(func=_reassign)

    registry = verbs.add_parser("schema-registry", help="the Avro schema registry (Confluent's REST API)")
    registry.add_argument("config", help="properties: listeners, kafkastore.bootstrap.servers, kafkastore.topic, "
                                         "schema.compatibility.level, mode, ...")
    registry.add_argument("--override", action="append", metavar="KEY=VALUE", help="override a config key")
    registry.set_defaults(func=_schema_registry)

    mirror = verbs.add_parser("mirror", help="copy topics from a live cluster into this (offline) one")
    mirror.add_argument("--consumer.config", dest="consumer_config", required=True,
                        help="properties of the source side (librdkafka names: bootstrap.servers, group.id, ...)")
    mirror.add_argument("--producer.config", dest="producer_config", required=True,
                        help="properties of the target side (librdkafka names)")
    mirror.add_argument("--whitelist", required=True, help="regex of topics to mirror")
    mirror.add_argument("--blacklist", help="regex of topics not to mirror")
    mirror.add_argument("--num.streams", dest="num_streams", type=int, default=1, help="consumer threads")
    mirror.add_argument("--source-name", default="source", help="name of the source cluster (provenance header)")
    mirror.add_argument("--checkpoint-topic", default="_mirror_checkpoints")
    mirror.add_argument("--stats-file", help="write counters (records/s, lag per partition, errors) as JSON here")
    mirror.add_argument("--metrics-listener", default="", help="serve Prometheus metrics on http://HOST:PORT/metrics")
    mirror.add_argument("--exactly-once", action="store_true",
                        help="copy in transactions with the consumed offsets (read_committed readers see no "
                             "duplicates, even across a kill -9 of the mirror)")
    mirror.add_argument("--copy", choices=("batches", "records"), default="batches",
                        help="batches (default): move whole record batches over the mirror's own connections "
                             "(PLAINTEXT clusters; secured ones and --exactly-once use records); records: copy "
                             "record by record through librdkafka")
    mirror.add_argument("--instance-id", default="0",
                        help="with --exactly-once: part of the transactional ids; a restart with the same id fences "
                             "the previous process (default 0; give each concurrent mirror process its own)")
    mirror.add_argument("--transaction-interval-ms", type=int, default=100,
                        help="with --exactly-once: the longest a batch waits for more records before its "
                             "transaction commits (MirrorMaker 2's transaction.boundary.interval.ms; default 100, "
                             "Kafka Streams' exactly-once commit.interval.ms); sooner at 2000 records")
    mirror.set_defaults(func=_mirror)

    translate = verbs.add_parser("mirror-translate", help="translate a group's source offsets to the target")
    translate.add_argument("--source-bootstrap", required=True)
    translate.add_argument("--target-bootstrap", required=True)
    translate.add_argument("--group", required=True)
    translate.add_argument("--source-name", default="source")
    translate.add_argument("--checkpoint-topic", default="_mirror_checkpoints")
    translate.add_argument("--apply", action="store_true", help="commit the translated offsets on the target")
    translate.set_defaults(func=_mirror_translate)

    counter = verbs.add_parser("audit-counter", help="count what one tier received, for the audit")
    counter.add_argument("--tier", required=True, help="the tier's name (e.g. live, offline)")
    counter.add_argument("--consumer.config", dest="consumer_config", required=True,
                         help="properties of the tier's cluster (librdkafka names; bootstrap.servers)")
    counter.add_argument("--whitelist", required=True, help="regex of topics to count")
    counter.add_argument("--schema-registry-url", required=True)
    counter.add_argument("--window-ms", type=int, default=60000, help="the producers' audit.window.ms")
    counter.add_argument("--emit-interval-ms", type=int, default=5000)
    counter.add_argument("--audit-bootstrap", help="cluster holding _audit (default: the tier's cluster)")
    counter.add_argument("--reader", choices=("auto", "batches", "records"), default="auto",
                         help="batches: whole record batches over the counter's own connections (PLAINTEXT); "
                              "records: librdkafka's consumer; auto (default): batches where the settings allow")
    counter.add_argument("--metrics-listener", default="", help="serve Prometheus metrics on http://HOST:PORT/metrics")
    counter.set_defaults(func=_audit_counter)

    service = verbs.add_parser("audit-service", help="serve the reconciled audit report (JSON API and HTML page)")
    service.add_argument("config", help="properties file (listeners, schema.registry.url, audit.cluster.*)")
    service.set_defaults(func=_audit_service)

    load = verbs.add_parser("load", help="one warehouse load cycle: plan, load (Spark), count, reconcile")
    load.add_argument("--config", required=True, help="load properties (bootstrap.servers, warehouse.path, ...)")
    load.set_defaults(func=_load)

    traffic = verbs.add_parser("demo-traffic", help="a demo frontend: Avro page views and clicks, audited")
    traffic.add_argument("--bootstrap-server", required=True)
    traffic.add_argument("--schema-registry-url", required=True)
    traffic.add_argument("--rate", type=float, default=100, help="events per second (default 100)")
    traffic.add_argument("--host-name", default="frontend", help="audit.host of the events")
    traffic.add_argument("--window-ms", type=int, default=60000, help="audit.window.ms")
    traffic.add_argument("--seconds", type=float, help="stop after this long (default: until SIGTERM)")
    traffic.add_argument("--command-config", help="client properties: security (Kafka's or librdkafka's names), "
                         "schema.registry.basic.auth.user.info, schema.registry.ssl.ca.location, ...")
    traffic.set_defaults(func=_demo_traffic)

    airflow = verbs.add_parser("airflow", help="Airflow's db migrate, then its scheduler, dag-processor, api-server "
                                               "and triggerer, each restarted when it exits (airflow standalone "
                                               "restarts none); until SIGTERM")
    airflow.set_defaults(func=_airflow)

    from logbus import postgres, spark_cluster  # their verbs: spark-master, spark-worker, postgres

    spark_cluster.add_parsers(verbs)
    postgres.add_parsers(verbs)

    state_help = "where the topology keeps data, configs, logs and pids (default state/topology)"
    up = verbs.add_parser("up", help="run the two-datacenter topology as local processes (keeps data)")
    up.add_argument("--topology", help="topology JSON (default topology/default.json)")
    up.add_argument("--state-dir", default="state/topology", help=state_help)
    up.set_defaults(func=_up)
    status = verbs.add_parser("status", help="health of every service of the local topology")
    status.add_argument("--state-dir", default="state/topology", help=state_help)
    status.add_argument("--json", action="store_true", help="one JSON document: each service with `healthy`")
    status.set_defaults(func=_status)
    down = verbs.add_parser("down", help="stop every service of the local topology (by pid)")
    down.add_argument("--state-dir", default="state/topology", help=state_help)
    down.set_defaults(func=_down)
    # internal (not in --help): `logbus up` runs every service under it; restarts it with backoff until signalled
    supervise = verbs.add_parser("supervise")
    supervise.add_argument("--state-dir", required=True, help=state_help)
    supervise.add_argument("--service", required=True, help="the service's name (its status: pids/<name>.status)")
    supervise.add_argument("argv", nargs=argparse.REMAINDER, help="-- and the service's command")
    supervise.set_defaults(func=_supervise)
    compose = verbs.add_parser("compose", help="generate docker-compose.yml and docker/config from the topology")
    compose.add_argument("--topology", help="topology JSON (default topology/default.json)")
    compose.add_argument("--output", default="docker-compose.yml")
    compose.add_argument("--config-dir", default="docker/config")
    compose.set_defaults(func=_compose)

    demo = verbs.add_parser("demo", help="start a local broker, produce and consume demo events, report")
    demo.add_argument("--state-dir", default="state/demo", help="where the broker keeps its logs")
    demo.add_argument("--messages", type=int, default=100_000, help="events to produce (default 100000)")
    demo.set_defaults(func=_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from telemetry.logs import configure

    try:
        configure(args.log_level, args.log_format)
    except ValueError as exc:  # LOGBUS_LOG_FORMAT set to something else
        print(f"logbus: {exc}", file=sys.stderr)
        return 2
    if args.log_level.upper() != "DEBUG":  # the registry client's HTTP library logs every request at INFO
        for name in ("httpx", "httpx2", "httpcore"):
            logging.getLogger(name).setLevel(logging.WARNING)
    from settings.properties import ConfigError

    try:
        return args.func(args)
    except ConfigError as exc:
        print(f"logbus: config error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except OSError as exc:
        print(f"logbus: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

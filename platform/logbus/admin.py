"""Operator verbs, in the shape of Kafka's tools:

``logbus topics --bootstrap-server B list|describe|create|alter|delete`` (kafka-topics.sh, whose ``--list``,
``--alter``, ... spellings are accepted too) through the Kafka protocol (confluent-kafka's AdminClient), against
any broker; ``alter --partitions N`` grows a topic (CreatePartitions); ``logbus reassign-partitions
--bootstrap-server B | --zookeeper Z --plan FILE [--execute | --verify | --cancel]`` (kafka-reassign-partitions.sh)
sends the plan to the controller (AlterPartitionReassignments) or writes it to ``/admin/reassign_partitions`` (the
classic tool's way); the controller adds the new replicas, waits until they are in sync, then drops the old ones.
"""

from __future__ import annotations

import json
import sys


class AdminError(Exception):
    """Reported as one line, exit code 1."""


def _admin(bootstrap: str, command_config: str | None = None, **conf):
    """An admin client; ``command_config``: a client properties file (security keys in Kafka's or librdkafka's
    names, as kafka-topics.sh's --command-config); ``conf``: more librdkafka settings."""
    from confluent_kafka.admin import AdminClient

    from logbus.user_configs import client_config

    # log_level 3: librdkafka's informational lines (e.g. "Purging 1 unserved events" at destruction) would break
    # the CLI's one-line errors on stderr
    return AdminClient({**client_config(bootstrap, command_config), "socket.timeout.ms": 10000, "log_level": 3,
                        **conf})


def _result(future, what: str, timeout: float = 30):
    from confluent_kafka import KafkaException

    try:
        return future.result(timeout)
    except KafkaException as exc:
        err = exc.args[0]
        raise AdminError(f"{what}: {err.name()}: {err.str()}") from None


def parse_replica_assignment(text: str) -> list[list[int]]:
    """kafka-topics.sh's ``--replica-assignment``: partitions separated by commas, each partition's brokers by
    colons (``0:1,1:2,2:0``), partition 0 first."""
    try:
        out = [[int(b) for b in part.split(":")] for part in text.split(",")]
    except ValueError:
        raise AdminError(f"--replica-assignment {text!r}: expected broker ids like 0:1,1:2") from None
    return out


def topics(args) -> int:
    from confluent_kafka.admin import NewTopic

    action = args.action or args.action_flag
    if action is None:
        raise AdminError("topics needs an action: list, describe, create, alter or delete")
    if args.action and args.action_flag and args.action != args.action_flag:
        raise AdminError(f"two actions given: {args.action} and --{args.action_flag}")
    admin = _admin(args.bootstrap_server, getattr(args, "command_config", None))
    if action == "list":
        metadata = admin.list_topics(timeout=15)
        for name in sorted(metadata.topics):
            print(name)
    elif action == "describe":
        metadata = admin.list_topics(topic=args.topic, timeout=15) if args.topic else admin.list_topics(timeout=15)
        for name in sorted(metadata.topics):
            topic = metadata.topics[name]
            if topic.error is not None:
                raise AdminError(f"topic {name}: {topic.error.name()}")
            parts = sorted(topic.partitions.values(), key=lambda p: p.id)
            rf = len(parts[0].replicas) if parts else 0
            print(f"Topic: {name}\tPartitionCount: {len(parts)}\tReplicationFactor: {rf}")
            for p in parts:
                print(f"\tTopic: {name}\tPartition: {p.id}\tLeader: {p.leader}\t"
                      f"Replicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isrs))}")
    elif action == "create":
        if not args.topic:
            raise AdminError("create needs --topic")
        configs = dict(item.split("=", 1) for item in (args.config or []) if "=" in item)
        futures = admin.create_topics([NewTopic(args.topic, args.partitions, args.replication_factor,
                                                config=configs)])
        _result(futures[args.topic], f"create {args.topic}")
        print(f"Created topic {args.topic}.")
    elif action == "alter":
        alter(admin, args)
    elif action == "delete":
        if not args.topic:
            raise AdminError("delete needs --topic")
        _result(admin.delete_topics([args.topic])[args.topic], f"delete {args.topic}")
        print(f"Deleted topic {args.topic}.")
    return 0


def alter(admin, args) -> None:
    """Grow ``--topic`` to ``--partitions`` (CreatePartitions, waiting up to 15 s for the new leaders). With
    ``--replica-assignment`` (every partition's replicas, as kafka-topics.sh takes them) the new partitions get
    the entries past the current count; otherwise the controller places them as a new topic's."""
    from confluent_kafka.admin import NewPartitions

    if not args.topic:
        raise AdminError("alter needs --topic")
    if args.partitions < 1:
        raise AdminError("alter needs --partitions N (the new partition count)")
    if args.config or args.replication_factor != -1:
        raise AdminError("alter changes the partition count only (--partitions, --replica-assignment)")
    assignment = None
    if args.replica_assignment:
        assignment = parse_replica_assignment(args.replica_assignment)
        topic = admin.list_topics(topic=args.topic, timeout=15).topics.get(args.topic)
        if topic is None or topic.error is not None:
            raise AdminError(f"alter {args.topic}: {topic.error.name() if topic else 'UNKNOWN_TOPIC_OR_PART'}")
        if len(assignment) != args.partitions:
            raise AdminError(f"--replica-assignment names {len(assignment)} partitions, --partitions is "
                             f"{args.partitions}")
        assignment = assignment[len(topic.partitions):]
    new = NewPartitions(args.topic, args.partitions, *([assignment] if assignment else []))
    try:
        futures = admin.create_partitions([new], operation_timeout=15, request_timeout=30)
    except (ValueError, TypeError) as exc:  # refused by the client library before sending
        raise AdminError(f"alter {args.topic}: {exc}") from None
    _result(futures[args.topic], f"alter {args.topic}")
    print(f"Topic {args.topic} now has {args.partitions} partitions.")


def read_plan(path: str) -> dict[tuple[str, int], list[int]]:
    """Kafka's reassignment JSON: {"version": 1, "partitions": [{"topic", "partition", "replicas"}]}."""
    try:
        with open(path) as f:
            data = json.load(f)
        plan = {(item["topic"], int(item["partition"])): [int(r) for r in item["replicas"]]
                for item in data["partitions"]}
    except OSError as exc:
        raise AdminError(f"cannot read {path}: {exc.strerror}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise AdminError(f"{path}: not a reassignment plan ({exc})") from None
    for (topic, p), replicas in plan.items():
        if not replicas or len(set(replicas)) != len(replicas):
            raise AdminError(f"{topic}-{p}: replicas must be distinct broker ids, got {replicas}")
    return plan


def kafka_python_admin(bootstrap: str, command_config: str | None, timeout_ms: int = 30000):
    """kafka-python's admin client (for what confluent-kafka's cannot ask: OffsetDelete, reassignments), with
    ``--command-config``'s security keys translated by the settings home; its log lines silenced (answers and
    exceptions carry what matters, and the CLI's errors are one line)."""
    import logging

    from kafka import KafkaAdminClient

    from settings.properties import ConfigError, read_properties
    from settings.security import ClientSecurity

    quiet = logging.getLogger("kafka")
    quiet.propagate, quiet.handlers = False, [logging.NullHandler()]
    props = read_properties(command_config) if command_config else {}
    try:
        security = ClientSecurity.from_properties(props).kafka_python()
    except ConfigError as exc:
        raise AdminError(f"--command-config {command_config}: {exc}") from None
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=timeout_ms, **security)


def reassign_through_brokers(args, plan: dict[tuple[str, int], list[int]]) -> int:
    """kafka-reassign-partitions.sh with ``--bootstrap-server``: AlterPartitionReassignments (``--execute``,
    ``--cancel``) and ListPartitionReassignments with the topics' replicas (``--verify``), through the controller."""
    from kafka import TopicPartition
    from kafka import errors as kerrors

    admin = None
    try:
        admin = kafka_python_admin(args.bootstrap_server, args.command_config)
        keys = {TopicPartition(t, p): (t, p) for t, p in plan}
        if args.verify:
            ongoing = admin.list_partition_reassignments(list(keys))
            topics = _admin(args.bootstrap_server, args.command_config).list_topics(timeout=10).topics
            done = True
            print("Status of partition reassignment:")
            for tp, (topic, p) in sorted(keys.items(), key=lambda kv: kv[1]):
                found = topics.get(topic)
                now = list(found.partitions[p].replicas) if found is not None and p in found.partitions else None
                state = "still in progress" if tp in ongoing else \
                    "complete" if now == plan[(topic, p)] else "not started or failed"
                done &= state == "complete"
                print(f"Reassignment of partition {topic}-{p} is {state}.")
            return 0 if done else 3
        result = admin.alter_partition_reassignments({tp: None if args.cancel else plan[key]
                                                      for tp, key in keys.items()})
    except kerrors.KafkaError as exc:
        raise AdminError(f"reassignment through {args.bootstrap_server}: {type(exc).__name__}") from None
    finally:
        if admin is not None:
            admin.close()
    failed = [f"{tp.topic}-{tp.partition}: {error.__name__}" for tp, error in sorted(result.items())
              if error is not None and error is not kerrors.NoError]
    if failed:
        raise AdminError("reassignment refused for " + "; ".join(failed))
    names = ",".join(f"{t}-{p}" for t, p in sorted(plan))
    print(f"Successfully {'cancelled' if args.cancel else 'started'} partition reassignments for {names}")
    return 0


def reassign(args) -> int:
    from broker.cluster import znodes
    from kazoo.client import KazooClient
    from kazoo.exceptions import NodeExistsError

    plan = read_plan(args.plan)
    if args.bootstrap_server:
        return reassign_through_brokers(args, plan)
    if args.cancel:
        raise AdminError("--cancel needs --bootstrap-server (a cancellation goes through the controller)")
    zk = KazooClient(hosts=args.zookeeper, timeout=10)
    try:
        zk.start(timeout=15)
    except Exception:
        raise AdminError(f"cannot reach ZooKeeper at {args.zookeeper}") from None
    try:
        live = {int(b) for b in zk.get_children(znodes.BROKER_IDS)} if zk.exists(znodes.BROKER_IDS) else set()
        current = {}
        for (topic, p) in plan:
            if not zk.exists(znodes.topic_path(topic)):
                raise AdminError(f"topic {topic} does not exist")
            assignment = znodes.decode_assignment(zk.get(znodes.topic_path(topic))[0])
            if p not in assignment.partitions:
                raise AdminError(f"{topic} has no partition {p}")
            current[(topic, p)] = assignment.partitions[p]
        if args.verify:
            pending = znodes.decode_reassignment(zk.get(znodes.REASSIGN)[0]) if zk.exists(znodes.REASSIGN) else {}
            done = True
            for key, replicas in sorted(plan.items()):
                state = "in progress" if key in pending else \
                    "completed" if current[key] == replicas else "not started or failed"
                done &= state == "completed"
                print(f"Reassignment of partition {key[0]}-{key[1]} is {state}.")
            return 0 if done else 3
        unknown = {r for replicas in plan.values() for r in replicas} - live
        if unknown:
            raise AdminError(f"brokers {sorted(unknown)} are not registered (live: {sorted(live)})")
        try:
            zk.create(znodes.REASSIGN, znodes.encode_reassignment(plan), makepath=True)
        except NodeExistsError:
            raise AdminError("a reassignment is already in progress (/admin/reassign_partitions)") from None
        for key, replicas in sorted(plan.items()):
            print(f"{key[0]}-{key[1]}: {current[key]} -> {replicas}")
        print("Successfully started reassignment; check with --verify.")
        return 0
    finally:
        zk.stop()
        zk.close()


def run(func, args) -> int:
    from confluent_kafka import KafkaException

    try:
        return func(args)
    except AdminError as exc:
        print(f"logbus: {exc}", file=sys.stderr)
        return 1
    except KafkaException as exc:  # e.g. no broker reachable: one line, not a traceback
        err = exc.args[0]
        print(f"logbus: {err.name()}: {err.str()}", file=sys.stderr)
        return 1

"""``logbus consumer-groups``, in the shape of Kafka's kafka-consumer-groups.sh, against any broker (confluent-kafka's
AdminClient; ``--command-config`` as ``logbus topics``):

    --list [--state [S,S]]                          the groups (ListGroups on every broker)
    --describe --group G | --all-groups             GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG
               [--offsets | --members [--verbose] | --state]     CONSUMER-ID HOST CLIENT-ID ("-" where unknown)
    --delete --group G | --all-groups               DeleteGroups; a group with members is refused (NON_EMPTY_GROUP)
    --delete-offsets --group G --topic T[:P,P]      OffsetDelete; TOPIC PARTITION STATUS (kafka-python's admin)
    --reset-offsets --group G --topic T[:P,P] | --all-topics
        --to-earliest | --to-latest | --to-current | --to-offset N | --shift-by N | --to-datetime YYYY-MM-DDTHH:mm:SS.sss
        [--dry-run (default) | --execute]           GROUP TOPIC PARTITION NEW-OFFSET; only an inactive group

Errors are one line on stderr and exit code 1. The pure parts (datetimes, topic specs, reset targets, the offsets
table's rows) are separate functions, unit-tested without a broker.
"""

from __future__ import annotations

import datetime
import logging
import re
import sys

from logbus.admin import AdminError, _result, kafka_python_admin

MISSING = "-"
RESETS = ("to_earliest", "to_latest", "to_current", "to_offset", "shift_by", "to_datetime")
# confluent-kafka's state names -> Kafka's
STATES = {"STABLE": "Stable", "EMPTY": "Empty", "DEAD": "Dead", "PREPARING_REBALANCING": "PreparingRebalance",
          "COMPLETING_REBALANCING": "CompletingRebalance", "UNKNOWN": "Unknown"}
# Kafka's exceptions for the codes DeleteGroups answers (kafka-consumer-groups.sh prints the exception)
KAFKA_EXCEPTIONS = {
    68: "org.apache.kafka.common.errors.GroupNotEmptyException: The group is not empty.",
    69: "org.apache.kafka.common.errors.GroupIdNotFoundException: The group id does not exist.",
    30: "org.apache.kafka.common.errors.GroupAuthorizationException: Not authorized to access group: {group}",
    16: "org.apache.kafka.common.errors.NotCoordinatorException: This is not the correct coordinator.",
    24: "org.apache.kafka.common.errors.InvalidGroupIdException: The configured groupId is invalid.",
}


def add_arguments(parser) -> None:
    parser.add_argument("--bootstrap-server", required=True, help="any broker, host:port")
    parser.add_argument("--command-config", help="client properties (security.protocol, sasl.*, ssl.*)")
    actions = parser.add_mutually_exclusive_group()
    for name in ("list", "describe", "delete", "delete-offsets", "reset-offsets"):
        actions.add_argument(f"--{name}", dest="action", action="store_const", const=name)
    parser.add_argument("--group", action="append", default=[], help="a group (repeatable)")
    parser.add_argument("--all-groups", action="store_true")
    parser.add_argument("--offsets", action="store_true", help="describe: offsets and lag (the default)")
    parser.add_argument("--members", action="store_true", help="describe: the members")
    parser.add_argument("--verbose", action="store_true", help="describe --members: instance ids and assignments")
    parser.add_argument("--state", nargs="?", const="", default=None, metavar="S,S",
                        help="describe: the groups' state; list: with their state (filtered by these states)")
    parser.add_argument("--topic", action="append", default=[], metavar="T[:P,P]",
                        help="reset-offsets: a topic, or some of its partitions (repeatable)")
    parser.add_argument("--all-topics", action="store_true", help="reset-offsets: every topic the group committed")
    parser.add_argument("--to-earliest", action="store_true")
    parser.add_argument("--to-latest", action="store_true")
    parser.add_argument("--to-current", action="store_true")
    parser.add_argument("--to-offset", type=int, metavar="N")
    parser.add_argument("--shift-by", type=int, metavar="N")
    parser.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss", help="UTC unless a zone is given")
    parser.add_argument("--dry-run", action="store_true", help="reset-offsets: only print (the default)")
    parser.add_argument("--execute", action="store_true", help="reset-offsets: commit the new offsets")
    parser.add_argument("--timeout", type=int, default=5000, metavar="MS", help="per request (default 5000)")


# ---- pure logic ------------------------------------------------------------------------------------------------
_DATETIME = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,3}))?(Z|[+-]\d{2}(?::?\d{2})?)?")


def parse_datetime(text: str) -> int:
    """Milliseconds since the epoch of Kafka's ``--to-datetime`` (``YYYY-MM-DDTHH:mm:SS.sss``, a zone ``Z`` or
    ``±hh:mm`` optional; without one UTC, as Kafka's ``Utils.getDateTime``)."""
    m = _DATETIME.fullmatch(text.strip())
    if m is None:
        raise AdminError(f"--to-datetime {text!r}: expected YYYY-MM-DDTHH:mm:SS.sss (optionally Z or +hh:mm)")
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    millis = int((m.group(7) or "0").ljust(3, "0"))
    zone = datetime.timezone.utc
    if m.group(8) and m.group(8) != "Z":
        digits = m.group(8)[1:].replace(":", "")
        offset = datetime.timedelta(hours=int(digits[:2]), minutes=int(digits[2:] or 0))
        zone = datetime.timezone(offset if m.group(8)[0] == "+" else -offset)
    try:
        at = datetime.datetime(year, month, day, hour, minute, second, millis * 1000, tzinfo=zone)
    except ValueError as exc:
        raise AdminError(f"--to-datetime {text!r}: {exc}") from None
    return int(at.timestamp() * 1000)


def parse_topics(specs: list[str]) -> list[tuple[str, list[int] | None]]:
    """``--topic t`` (all partitions: None) or ``--topic t:0,2``."""
    out = []
    for spec in specs:
        topic, _, parts = spec.partition(":")
        if not topic:
            raise AdminError(f"--topic {spec!r}: no topic name")
        try:
            out.append((topic, sorted({int(p) for p in parts.split(",")}) if parts else None))
        except ValueError:
            raise AdminError(f"--topic {spec!r}: expected TOPIC or TOPIC:P,P") from None
    return out


def reset_targets(how: str, value, partitions: list[tuple[str, int]], committed: dict, earliest: dict,
                  latest: dict, at_time: dict | None = None) -> dict[tuple[str, int], int]:
    """The new offset of each partition, as kafka-consumer-groups.sh computes it: ``--to-offset`` and
    ``--shift-by`` are clamped into [earliest, latest]; ``--shift-by`` needs a committed offset; ``--to-current``
    and ``--to-datetime`` fall back to the log end where there is no committed offset / no record that recent."""
    out = {}
    for tp in partitions:
        lo, hi = earliest[tp], latest[tp]
        if how == "to_earliest":
            new = lo
        elif how == "to_latest":
            new = hi
        elif how == "to_current":
            new = committed.get(tp, hi)
        elif how == "to_datetime":
            found = (at_time or {}).get(tp, -1)
            new = hi if found is None or found < 0 else found
        elif how == "to_offset":
            new = min(max(value, lo), hi)
        elif how == "shift_by":
            if tp not in committed:
                raise AdminError(f"Cannot shift offset for partition {tp[0]}-{tp[1]} since there is no current "
                                 f"committed offset")
            new = min(max(committed[tp] + value, lo), hi)
        else:
            raise AdminError(f"unknown reset {how}")
        out[tp] = new
    return out


def offset_rows(group: str, members: list[tuple[str, str, str, list[tuple[str, int]]]], committed: dict,
                ends: dict) -> list[list[str]]:
    """kafka-consumer-groups.sh's --describe rows: each member's partitions (members without any: one row of
    "-"), then committed partitions no member holds (CONSUMER-ID, HOST, CLIENT-ID "-"); LAG = LOG-END - CURRENT."""
    def cell(v):
        return MISSING if v is None else str(v)

    rows, held = [], set()
    for member_id, host, client_id, partitions in members:
        for tp in sorted(partitions):
            held.add(tp)
            current, end = committed.get(tp), ends.get(tp)
            lag = end - current if current is not None and end is not None else None
            rows.append([group, tp[0], str(tp[1]), cell(current), cell(end), cell(lag), member_id, host, client_id])
        if not partitions:
            rows.append([group, MISSING, MISSING, MISSING, MISSING, MISSING, member_id, host, client_id])
    for tp in sorted(set(committed) - held):
        end = ends.get(tp)
        rows.append([group, tp[0], str(tp[1]), str(committed[tp]), cell(end),
                     cell(None if end is None else end - committed[tp]), MISSING, MISSING, MISSING])
    return rows


def table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header) - 1)]
    return "\n".join(" ".join([*(c.ljust(w) for c, w in zip(r, widths)), r[-1]]).rstrip() for r in [header, *rows])


# ---- talking to the brokers --------------------------------------------------------------------------------------
def _admin(args):
    """``logbus topics``' admin client (``--command-config`` read the same way), librdkafka's log lines dropped:
    each error comes back with its answer, as one line."""
    from logbus.admin import _admin as admin_client

    quiet = logging.getLogger("logbus.consumer_groups.librdkafka")
    quiet.propagate, quiet.handlers = False, [logging.NullHandler()]
    return admin_client(args.bootstrap_server, args.command_config, logger=quiet)


def _wait(future, what: str, timeout_s: float):
    return _result(future, what, timeout_s + 5)


class Groups:
    def __init__(self, args):
        self.args, self.admin, self.timeout_s = args, _admin(args), args.timeout / 1000
        self.metadata = None

    def topics(self):
        """Metadata of every topic (raises KafkaException, one line in run(), when no broker answers)."""
        if self.metadata is None:
            self.metadata = self.admin.list_topics(timeout=self.timeout_s)
        return self.metadata.topics

    def listed(self) -> dict[str, str]:
        self.topics()  # one clear error when no broker answers (ListGroups would only time out)
        result = _wait(self.admin.list_consumer_groups(request_timeout=self.timeout_s), "list groups", self.timeout_s)
        if result.errors and not result.valid:
            err = result.errors[0]
            raise AdminError(f"list groups: {err.name()}: {err.str()}")
        return {g.group_id: STATES.get(getattr(g.state, "name", ""), "Unknown") for g in result.valid}

    def group_ids(self) -> list[str]:
        if self.args.all_groups:
            return sorted(self.listed())
        if not self.args.group:
            raise AdminError(f"--{self.args.action} needs --group G or --all-groups")
        return list(dict.fromkeys(self.args.group))

    def describe(self, group: str):
        self.topics()  # a clear error when no broker answers (DescribeGroups would only time out)
        return _wait(self.admin.describe_consumer_groups([group], request_timeout=self.timeout_s)[group],
                     f"describe {group}", self.timeout_s)

    def committed(self, group: str) -> dict[tuple[str, int], int]:
        from confluent_kafka import ConsumerGroupTopicPartitions

        result = _wait(self.admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                                              request_timeout=self.timeout_s)[group],
                       f"offsets of {group}", self.timeout_s)
        return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions if tp.offset >= 0}

    def offsets(self, partitions, spec) -> dict[tuple[str, int], int]:
        """ListOffsets of ``partitions`` for one OffsetSpec (earliest, latest, a timestamp)."""
        from confluent_kafka import TopicPartition

        if not partitions:
            return {}
        asked = {TopicPartition(t, p): spec for t, p in sorted(partitions)}
        futures = self.admin.list_offsets(asked, request_timeout=self.timeout_s)
        return {(tp.topic, tp.partition): _wait(f, f"offsets of {tp.topic}-{tp.partition}", self.timeout_s).offset
                for tp, f in futures.items()}


def _state(description) -> str:
    return STATES.get(getattr(description.state, "name", ""), "Unknown")


def list_groups(g: Groups) -> int:
    listed = g.listed()
    if g.args.state is None:
        for group in sorted(listed):
            print(group)
        return 0
    wanted = {s.strip().lower() for s in g.args.state.split(",") if s.strip()}
    rows = [[group, state] for group, state in sorted(listed.items()) if not wanted or state.lower() in wanted]
    print(table(["GROUP", "STATE"], rows))
    return 0


def describe(g: Groups) -> int:
    args = g.args
    if sum(map(bool, (args.offsets, args.members, args.state is not None))) > 1:
        raise AdminError("--describe takes one of --offsets, --members, --state")
    for group in g.group_ids():
        d = g.describe(group)
        state = _state(d)
        if state == "Dead":
            raise AdminError(f"Consumer group '{group}' does not exist.")
        if args.state is not None:
            coordinator = f"{d.coordinator.host}:{d.coordinator.port}  ({d.coordinator.id})"
            print("\n" + table(["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
                               [[group, coordinator, d.partition_assignor or "", state, str(len(d.members))]]))
            continue
        if state == "Empty":
            print(f"\nConsumer group '{group}' has no active members.", file=sys.stderr)
        elif state != "Stable":
            print(f"\nWarning: Consumer group '{group}' is rebalancing.", file=sys.stderr)
        members = [(m.member_id, m.host or MISSING, m.client_id or MISSING,
                    [(tp.topic, tp.partition) for tp in (m.assignment.topic_partitions if m.assignment else [])])
                   for m in d.members]
        if args.members:
            header = ["GROUP", "CONSUMER-ID", *(["GROUP-INSTANCE-ID"] if args.verbose else []), "HOST", "CLIENT-ID",
                      "#PARTITIONS", *(["ASSIGNMENT"] if args.verbose else [])]
            rows = []
            for m, (member_id, host, client_id, parts) in zip(d.members, members):
                by_topic: dict[str, list[int]] = {}
                for t, p in parts:
                    by_topic.setdefault(t, []).append(p)
                assignment = ",".join(f"{t}({','.join(map(str, sorted(ps)))})" for t, ps in sorted(by_topic.items()))
                rows.append([group, member_id, *([m.group_instance_id or MISSING] if args.verbose else []), host,
                             client_id, str(len(parts)), *([assignment or MISSING] if args.verbose else [])])
            if rows:
                print("\n" + table(header, rows))
            continue
        committed = g.committed(group)
        held = {tp for *_, parts in members for tp in parts}
        from confluent_kafka.admin import OffsetSpec

        # a committed offset of a topic this cluster does not have (an exactly-once mirror keeps its source
        # offsets on the target) has no log end: "-", as Kafka's tool prints it, not an error for the whole group
        topics = g.topics()
        present = {tp for tp in set(committed) | held
                   if tp[0] in topics and not topics[tp[0]].error and tp[1] in topics[tp[0]].partitions}
        ends = g.offsets(present, OffsetSpec.latest())
        rows = offset_rows(group, members, committed, ends)
        if rows:  # as Kafka: an Empty group without offsets prints only the line above
            print("\n" + table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                                "CONSUMER-ID", "HOST", "CLIENT-ID"], rows))
    return 0


def delete(g: Groups) -> int:
    from confluent_kafka import KafkaException

    if g.args.topic:
        raise AdminError("--delete takes --group or --all-groups (deleting a topic's offsets is not supported)")
    groups = g.group_ids()
    if not groups:
        raise AdminError("no consumer group to delete")
    g.topics()  # one clear error when no broker answers
    futures = g.admin.delete_consumer_groups(groups, request_timeout=g.timeout_s)
    done, failed = [], []
    for group in groups:
        try:
            futures[group].result(g.timeout_s + 5)
            done.append(group)
        except KafkaException as exc:
            err = exc.args[0]
            reason = KAFKA_EXCEPTIONS.get(err.code(), f"{err.name()}: {err.str()}").format(group=group)
            failed.append(f"Group '{group}' could not be deleted due to: {reason}")
    if done:
        print(f"Deletion of requested consumer groups ({', '.join(repr(x) for x in done)}) was successful.")
    if failed:
        raise AdminError("Deletion of some consumer groups failed: " + " ".join(failed))
    return 0


def delete_offsets(g: Groups) -> int:
    """kafka-consumer-groups.sh's ``--delete-offsets``: one group, one or more topics (all their partitions unless
    named). The whole request refused is one line; a partition refused is its row's status."""
    from kafka import TopicPartition as KTopicPartition
    from kafka import errors as kerrors

    args = g.args
    if len(args.group) != 1 or args.all_groups:
        raise AdminError("--delete-offsets takes exactly one --group")
    if not args.topic:
        raise AdminError("--delete-offsets needs --topic T[:P,P]")
    topics, partitions = g.topics(), []
    for topic, parts in parse_topics(args.topic):
        known = sorted(topics[topic].partitions) if topic in topics and not topics[topic].error else None
        if known is None:
            raise AdminError(f"Topic {topic} does not exist (UNKNOWN_TOPIC_OR_PART)")
        partitions += [(topic, p) for p in (parts if parts is not None else known)]
    group, admin = args.group[0], None
    try:
        admin = kafka_python_admin(args.bootstrap_server, args.command_config, args.timeout)
        result = admin.delete_group_offsets(group, [KTopicPartition(t, p) for t, p in partitions])
    except kerrors.KafkaError as exc:
        raise AdminError(f"Deletion of offsets of group '{group}' failed: {type(exc).__name__}") from None
    finally:
        if admin is not None:
            admin.close()
    statuses = {(tp.topic, tp.partition): ("Successful" if error is kerrors.NoError else f"Error:{error.__name__}")
                for tp, error in result.items()}
    print(f"Request succeed for deleting offsets from group {group}.\n")
    print(table(["TOPIC", "PARTITION", "STATUS"], [[t, str(p), statuses.get((t, p), "-")] for t, p in partitions]))
    return 0


def reset(g: Groups) -> int:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    args = g.args
    chosen = [r for r in RESETS if getattr(args, r) is not None and getattr(args, r) is not False]
    if len(chosen) != 1:
        raise AdminError("--reset-offsets needs exactly one of --to-earliest, --to-latest, --to-current, "
                         "--to-offset, --shift-by, --to-datetime")
    how = chosen[0]
    if args.dry_run and args.execute:
        raise AdminError("--reset-offsets takes only one of --dry-run and --execute")
    if bool(args.topic) == args.all_topics:
        raise AdminError("--reset-offsets needs one scope: --all-topics or --topic T[:P,P]")
    at_ms = parse_datetime(args.to_datetime) if how == "to_datetime" else None
    specs = parse_topics(args.topic)
    for group in g.group_ids():
        state = _state(g.describe(group))
        if state not in ("Empty", "Dead"):
            raise AdminError(f"Assignments can only be reset if the group '{group}' is inactive, but the current "
                             f"state is {state}.")
        committed = g.committed(group)
        if args.all_topics:
            partitions = sorted(committed)
        else:
            partitions, topics = [], g.topics()
            for topic, parts in specs:
                known = sorted(topics[topic].partitions) if topic in topics and not topics[topic].error else None
                if known is None:
                    raise AdminError(f"Topic {topic} does not exist (UNKNOWN_TOPIC_OR_PART)")
                missing = sorted(set(parts or []) - set(known))
                if missing:
                    raise AdminError(f"Topic {topic} has no partition {missing[0]} (partitions 0-{len(known) - 1})")
                partitions += [(topic, p) for p in (parts if parts is not None else known)]
        earliest = g.offsets(partitions, OffsetSpec.earliest())
        latest = g.offsets(partitions, OffsetSpec.latest())
        at_time = g.offsets(partitions, OffsetSpec.for_timestamp(at_ms)) if at_ms is not None else None
        targets = reset_targets(how, getattr(args, how), partitions, committed, earliest, latest, at_time)
        if args.execute and targets:
            request = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, o) for (t, p), o in targets.items()])
            result = _wait(g.admin.alter_consumer_group_offsets([request], request_timeout=g.timeout_s)[group],
                           f"reset {group}", g.timeout_s)
            for tp in result.topic_partitions:
                if tp.error is not None:
                    raise AdminError(f"reset {group} {tp.topic}-{tp.partition}: {tp.error.name()}: {tp.error.str()}")
        print("\n" + table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                           [[group, t, str(p), str(o)] for (t, p), o in sorted(targets.items())]))
    return 0


def consumer_groups(args) -> int:
    commands = {"list": list_groups, "describe": describe, "delete": delete, "delete-offsets": delete_offsets,
                "reset-offsets": reset}
    if args.action is None:
        raise AdminError("consumer-groups needs exactly one action: --list, --describe, --delete, "
                         "--delete-offsets, --reset-offsets")
    if args.timeout <= 0:
        raise AdminError(f"--timeout {args.timeout}: must be positive (ms)")
    if args.action != "list" and args.group and args.all_groups:
        raise AdminError("--group and --all-groups exclude each other")
    try:
        return commands[args.action](Groups(args))
    except (ValueError, TypeError) as exc:  # refused by the client library before sending
        raise AdminError(str(exc)) from None


def run(args) -> int:
    from logbus.admin import run as run_admin

    return run_admin(consumer_groups, args)

"""Topic metadata: names, partition counts, topic ids and per-topic config overrides.

Standalone mode keeps it in ``<first log dir>/logbus-topics.json`` (written atomically). The cluster issue
replaces the store with ZooKeeper's ``/brokers/topics`` and ``/config/topics``; handlers only see
:class:`TopicStore`'s methods, so they do not change.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from dataclasses import dataclass, field

from broker.log.storage_errors import replace_file
from broker.metadata.topic_configs import TOPIC_CONFIGS, InvalidConfig, validate

__all__ = ["TOPIC_CONFIGS", "TopicError", "TopicInfo", "TopicStore", "check_new_partitions", "validate_topic_configs",
           "validate_topic_name"]

_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")  # matched whole (fullmatch): "$" would accept a trailing newline


class TopicError(ValueError):
    """Carries the Kafka error name to answer with (e.g. ``invalid_topic_exception``)."""

    def __init__(self, error: str, message: str):
        super().__init__(message)
        self.error = error


def validate_topic_name(name: str) -> None:
    if not name or name in (".", ".."):
        raise TopicError("invalid_topic_exception", "topic name is empty or '.'/'..'")
    if len(name) > 249:
        raise TopicError("invalid_topic_exception", "topic name longer than 249 characters")
    if not _LEGAL.fullmatch(name):
        raise TopicError("invalid_topic_exception", f"topic name {name!r} has characters outside [a-zA-Z0-9._-]")


def validate_topic_configs(configs: dict[str, str], defaults: dict[str, str] | None = None) -> None:
    """INVALID_CONFIG, with Kafka's message, unless every override is a known topic config with a valid value
    (see :mod:`broker.metadata.topic_configs`; ``defaults``: the broker's, for checks across configs)."""
    try:
        validate(configs, defaults)
    except InvalidConfig as exc:
        raise TopicError("invalid_config", str(exc)) from None


def check_new_partitions(current: int, count: int, assignments: list[list[int]] | None, replication_factor: int,
                         brokers: set[int]) -> dict[int, list[int]] | None:
    """Kafka's checks of one CreatePartitions entry (its ZooKeeper-mode admin manager, same messages): the count
    must grow; a manual assignment names ``count - current`` partitions, each with ``replication_factor``
    distinct registered brokers. Returns partition -> replicas of the new partitions as assigned, or None when
    placement is left to the broker."""
    if count < current:
        raise TopicError("invalid_partitions",
                         f"Topic currently has {current} partitions, which is higher than the requested {count}.")
    if count == current:
        raise TopicError("invalid_partitions", f"Topic already has {current} partitions.")
    if assignments is None:
        return None
    unknown = sorted({b for replicas in assignments for b in replicas} - brokers)
    if unknown:
        raise TopicError("invalid_replica_assignment",
                         f"Unknown broker(s) in replica assignment: {', '.join(map(str, unknown))}.")
    if len(assignments) != count - current:
        raise TopicError("invalid_replica_assignment", f"Increasing the number of partitions by {count - current} "
                                                       f"but {len(assignments)} assignments provided.")
    new = {current + i: list(replicas) for i, replicas in enumerate(assignments)}
    for p, replicas in new.items():
        if not replicas:
            raise TopicError("invalid_replica_assignment", f"Cannot have replication factor of 0 for partition id {p}.")
        if len(set(replicas)) != len(replicas):
            raise TopicError("invalid_replica_assignment", "Duplicate brokers not allowed in replica assignment: "
                                                           f"{', '.join(map(str, replicas))} for partition id {p}.")
    bad = {p: len(r) for p, r in new.items() if len(r) != replication_factor}
    if bad:
        raise TopicError("invalid_replica_assignment",
                         f"Inconsistent replication factor between partitions, partition 0 has {replication_factor} "
                         f"while partitions [{', '.join(map(str, bad))}] have replication factors "
                         f"[{', '.join(map(str, bad.values()))}], respectively.")
    return new


@dataclass
class TopicInfo:
    name: str
    partitions: int
    topic_id: uuid.UUID
    configs: dict[str, str] = field(default_factory=dict)
    replication_factor: int = 1


class TopicStore:
    FILE = "logbus-topics.json"

    def __init__(self, directory: str):
        self.path = os.path.join(directory, self.FILE)
        self.topics: dict[str, TopicInfo] = {}
        if os.path.exists(self.path):
            with open(self.path) as f:
                for item in json.load(f):
                    info = TopicInfo(item["name"], item["partitions"], uuid.UUID(item["topic_id"]),
                                     item.get("configs", {}), item.get("replication_factor", 1))
                    self.topics[info.name] = info

    def _save(self) -> None:
        """Replace the file whole, or raise OSError and keep the old one (a full disk)."""
        replace_file(self.path, json.dumps([{"name": t.name, "partitions": t.partitions, "topic_id": str(t.topic_id),
                                             "configs": t.configs, "replication_factor": t.replication_factor}
                                            for t in self.topics.values()], indent=1))

    def _save_or_undo(self, undo, what: str) -> None:
        """Save; if the disk refuses, undo the change in memory too and answer KAFKA_STORAGE_ERROR."""
        try:
            self._save()
        except OSError as exc:
            undo()
            raise TopicError("kafka_storage_error", f"cannot record {what}: {exc}") from None

    def get(self, name: str) -> TopicInfo | None:
        return self.topics.get(name)

    def by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return next((t for t in self.topics.values() if t.topic_id == topic_id), None)

    def create(self, name: str, partitions: int, replication_factor: int, configs: dict[str, str],
               validate_only: bool = False) -> TopicInfo:
        validate_topic_name(name)
        if name in self.topics:
            raise TopicError("topic_already_exists", f"topic {name!r} already exists")
        if partitions < 1:
            raise TopicError("invalid_partitions", "number of partitions must be at least 1")
        if replication_factor != 1:
            raise TopicError("invalid_replication_factor",
                             f"replication factor {replication_factor} is larger than the 1 available broker")
        validate_topic_configs(configs)
        info = TopicInfo(name, partitions, uuid.uuid4(), dict(configs), replication_factor)
        if not validate_only:
            self.topics[name] = info  # a full disk: the topic does not exist, in memory or on disk
            self._save_or_undo(lambda: self.topics.pop(name), f"topic {name!r}")
        return info

    def set_configs(self, name: str, configs: dict[str, str]) -> None:
        info = self.topics[name]
        old, info.configs = info.configs, dict(configs)
        self._save_or_undo(lambda: setattr(info, "configs", old), f"the configs of topic {name!r}")

    def add_partitions(self, name: str, count: int) -> None:
        """Grow a topic to ``count`` partitions (checked by :func:`check_new_partitions` first)."""
        info = self.topics[name]
        old, info.partitions = info.partitions, count
        self._save_or_undo(lambda: setattr(info, "partitions", old), f"the new partitions of topic {name!r}")

    def delete(self, name: str) -> None:
        info = self.topics.pop(name, None)
        if info is None:
            raise TopicError("unknown_topic_or_partition", f"topic {name!r} does not exist")
        self._save_or_undo(lambda: self.topics.__setitem__(name, info), f"the deletion of topic {name!r}")

"""ZooKeeper paths and the JSON of each znode, in the layout Kafka used (so ``zkCli.sh`` shows an operator what
they expect). Pure: no I/O.

    /brokers/ids/<id>                               ephemeral: endpoints, host, port, rack
    /brokers/topics/<topic>                         replica assignment (+ topic id)
    /brokers/topics/<topic>/partitions/<p>/state    leader, leader_epoch, isr, controller_epoch
    /controller                                     ephemeral: the controller's broker id
    /controller_epoch                               a counter that fences stale controllers
    /config/topics/<topic>                          per-topic config overrides
    /admin/reassign_partitions                      a pending reassignment
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from dataclasses import dataclass, field

BROKER_IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
CONFIG_TOPICS = "/config/topics"
REASSIGN = "/admin/reassign_partitions"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
CLUSTER_ID = "/cluster/id"
PERSISTENT_PATHS = (BROKER_IDS, TOPICS, CONFIG_TOPICS, "/admin")


def node_name(text: str) -> str:
    """A client-chosen string (group id, member id) as one znode name: ``/`` and ``%`` percent-encoded, as are
    the characters ZooKeeper refuses in paths (controls, U+D800-U+F8FF, U+FFF0-U+FFFF) and the names ``.`` and
    ``..``. Names without those characters are unchanged (existing registries keep their paths); encoded ones
    cannot collide with them, since ``%`` itself is encoded."""
    if text in (".", ".."):
        return text.replace(".", "%2E")
    out = []
    for ch in text:
        code = ord(ch)
        if ch in "/%" or code < 0x20 or 0x7F <= code <= 0x9F or 0xD800 <= code <= 0xF8FF or code >= 0xFFF0:
            out.append("".join(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass")))
        else:
            out.append(ch)
    return "".join(out) or "%00"  # an empty group id never gets here (INVALID_GROUP_ID); keep names non-empty


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{TOPICS}/{topic}/partitions"


def state_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


def config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


def _dump(obj: dict) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


# ---- /brokers/ids/<id> ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BrokerInfo:
    broker_id: int
    host: str
    port: int
    rack: str | None = None
    # listener name -> advertised (host, port); Kafka's "endpoints" + "listener_security_protocol_map"
    endpoints: tuple[tuple[str, str, int], ...] = ()

    def endpoint(self, listener: str) -> tuple[str | None, int]:
        """(host, port) of the named listener, or (None, -1) when the broker has none of that name. A
        registration without endpoints (an old one) has only PLAINTEXT at host:port."""
        for name, host, port in self.endpoints or (("PLAINTEXT", self.host, self.port),):
            if name == listener:
                return host, port
        return None, -1


def encode_broker(info: BrokerInfo, protocols: dict[str, str] | None = None) -> bytes:
    """``protocols``: listener name -> security protocol (``listener.security.protocol.map``)."""
    endpoints = info.endpoints or (("PLAINTEXT", info.host, info.port),)
    return _dump({"listener_security_protocol_map": {name: (protocols or {}).get(name, "PLAINTEXT")
                                                     for name, _, _ in endpoints},
                  "endpoints": [f"{name}://{host}:{port}" for name, host, port in endpoints], "jmx_port": -1,
                  "features": {}, "host": info.host, "port": info.port, "rack": info.rack,
                  "timestamp": str(int(time.time() * 1000)), "version": 5})


def decode_broker(broker_id: int, data: bytes) -> BrokerInfo:
    obj = json.loads(data)
    endpoints = []
    for item in obj.get("endpoints", []):
        name, _, rest = item.partition("://")
        host, _, port = rest.rpartition(":")
        endpoints.append((name, host.strip("[]"), int(port)))
    return BrokerInfo(broker_id, obj["host"], int(obj["port"]), obj.get("rack"), tuple(endpoints))


# ---- /brokers/topics/<topic> ------------------------------------------------------------------------------
def topic_id_text(topic_id: uuid.UUID) -> str:
    """Kafka's Uuid.toString(): URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def topic_id_from_text(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


@dataclass
class TopicAssignment:
    topic_id: uuid.UUID
    partitions: dict[int, list[int]]  # partition -> replicas, the first one preferred
    adding: dict[int, list[int]] = field(default_factory=dict)
    removing: dict[int, list[int]] = field(default_factory=dict)

    # ---- a reassignment under way (Kafka's two phases) --------------------------------------------------------
    def original(self, p: int) -> list[int]:
        """The partition's replicas before its reassignment: the current ones without those being added."""
        adding = self.adding.get(p, ())
        return [r for r in self.partitions[p] if r not in adding]

    def reassigning(self, p: int, target: list[int]) -> tuple[list[int], list[int], list[int]]:
        """Kafka's first phase towards ``target``: (replicas: the target, then the original ones leaving; the
        replicas being added; those being removed), always reckoned from the replicas before it started."""
        base = self.original(p)
        return (list(target) + [r for r in base if r not in target], [r for r in target if r not in base],
                [r for r in base if r not in target])

    def move_towards(self, p: int, target: list[int]) -> list[int]:
        """Record the first phase towards ``target``; returns the replicas (old and new together)."""
        self.partitions[p], self.adding[p], self.removing[p] = self.reassigning(p, target)
        return list(self.partitions[p])

    def settle(self, p: int, replicas: list[int]) -> None:
        """The reassignment is over (done, or cancelled back to the original replicas)."""
        self.partitions[p] = list(replicas)
        self.adding.pop(p, None)
        self.removing.pop(p, None)


def encode_assignment(a: TopicAssignment) -> bytes:
    return _dump({"version": 3, "topic_id": topic_id_text(a.topic_id),
                  "partitions": {str(p): r for p, r in sorted(a.partitions.items())},
                  "adding_replicas": {str(p): r for p, r in a.adding.items()},
                  "removing_replicas": {str(p): r for p, r in a.removing.items()}})


def decode_assignment(data: bytes) -> TopicAssignment:
    obj = json.loads(data)
    topic_id = topic_id_from_text(obj["topic_id"]) if obj.get("topic_id") else uuid.UUID(int=0)
    return TopicAssignment(topic_id, {int(p): list(r) for p, r in obj["partitions"].items()},
                           {int(p): list(r) for p, r in obj.get("adding_replicas", {}).items()},
                           {int(p): list(r) for p, r in obj.get("removing_replicas", {}).items()})


# ---- /brokers/topics/<topic>/partitions/<p>/state ---------------------------------------------------------
@dataclass(frozen=True)
class PartitionState:
    leader: int  # -1: no leader (offline)
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    version: int = -1  # the znode's version, for conditional writes
    created: int = -1  # the znode's creation zxid (czxid): a state znode made again is newer at any version

    @property
    def age(self) -> tuple[int, int]:
        """Orders two reads of a partition's state znode: the later one is the larger."""
        return self.created, self.version

    def with_(self, **changes) -> "PartitionState":
        values = {"leader": self.leader, "leader_epoch": self.leader_epoch, "isr": self.isr,
                  "controller_epoch": self.controller_epoch, "version": self.version, "created": self.created,
                  **changes}
        values["isr"] = tuple(values["isr"])
        return PartitionState(**values)


def encode_state(s: PartitionState) -> bytes:
    return _dump({"controller_epoch": s.controller_epoch, "leader": s.leader, "version": 1,
                  "leader_epoch": s.leader_epoch, "isr": list(s.isr)})


def decode_state(data: bytes, version: int, created: int = -1) -> PartitionState:
    obj = json.loads(data)
    return PartitionState(int(obj["leader"]), int(obj["leader_epoch"]), tuple(obj["isr"]),
                          int(obj["controller_epoch"]), version, created)


# ---- /controller, /config/topics/<topic> ------------------------------------------------------------------
def encode_controller(broker_id: int) -> bytes:
    return _dump({"version": 1, "brokerid": broker_id, "timestamp": str(int(time.time() * 1000))})


def decode_controller(data: bytes | None) -> int:
    if not data:
        return -1
    return int(json.loads(data)["brokerid"])


def encode_topic_config(configs: dict[str, str]) -> bytes:
    return _dump({"version": 1, "config": configs})


def decode_topic_config(data: bytes | None) -> dict[str, str]:
    return dict(json.loads(data)["config"]) if data else {}


def encode_reassignment(plan: dict[tuple[str, int], list[int]]) -> bytes:
    return _dump({"version": 1, "partitions": [{"topic": t, "partition": p, "replicas": r}
                                               for (t, p), r in sorted(plan.items())]})


def decode_reassignment(data: bytes | None) -> dict[tuple[str, int], list[int]]:
    if not data:
        return {}
    return {(item["topic"], int(item["partition"])): list(item["replicas"])
            for item in json.loads(data)["partitions"]}


def encode_producer_id_block(broker_id: int, start: int, end: int) -> bytes:
    return _dump({"version": 1, "broker": broker_id, "block_start": str(start), "block_end": str(end - 1)})


def decode_producer_id_block(data: bytes | None) -> int:
    """The first id after the latest reserved block."""
    return int(json.loads(data)["block_end"]) + 1 if data else 0


def encode_cluster_id(cluster_id: str) -> bytes:
    return _dump({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes) -> str:
    return json.loads(data)["id"]

"""SCRAM credentials where Kafka keeps them: ZooKeeper node ``/config/users/<user>`` holding
``{"version":1,"config":{"SCRAM-SHA-512":"salt=...,stored_key=...,server_key=...,iterations=4096"}}``.
A standalone broker (no ZooKeeper) reads the same per-user JSON from ``<first log dir>/scram-credentials.json``
(``{"<user>": {"version":1,"config":{...}}}``). Reading is here; writing is ``logbus configs``."""

from __future__ import annotations

import json
from pathlib import Path

from broker.security.scram import ScramCredential, ScramError

USERS_PATH = "/config/users"
CHANGES_PATH = "/config/changes"
STANDALONE_FILE = "scram-credentials.json"


def user_path(user: str) -> str:
    if not user or "/" in user or user in (".", ".."):
        raise ValueError(f"invalid user name {user!r}")
    return f"{USERS_PATH}/{user}"


def credential_from_node(data: bytes | None, mechanism: str) -> ScramCredential | None:
    if not data:
        return None
    try:
        text = json.loads(data).get("config", {}).get(mechanism.upper())
        return ScramCredential.decode(text) if text else None
    except (ValueError, AttributeError, ScramError):
        return None


async def lookup(broker, user: str, mechanism: str) -> ScramCredential | None:
    """The user's credential for ``mechanism``, or None."""
    try:
        path = user_path(user)
    except ValueError:
        return None
    cluster = getattr(broker, "cluster", None)
    if cluster is not None:
        data, _ = await cluster.zk.get_or_none(path)
        return credential_from_node(data, mechanism)
    file = Path(broker.config["log.dirs"][0]) / STANDALONE_FILE
    try:
        node = json.loads(file.read_text()).get(user)
    except (OSError, ValueError):
        return None
    return credential_from_node(json.dumps(node).encode() if node else None, mechanism)


def updated_node(data: bytes | None, add: dict[str, ScramCredential], delete: list[str]) -> bytes:
    """The user's node after adding / deleting mechanisms (other configs of the user are kept)."""
    node = {"version": 1, "config": {}}
    if data:
        try:
            node = json.loads(data)
            node.setdefault("config", {})
        except ValueError:
            pass
    for mechanism in delete:
        node["config"].pop(mechanism.upper(), None)
    for mechanism, credential in add.items():
        node["config"][mechanism.upper()] = credential.encode()
    return json.dumps(node, separators=(",", ":")).encode()

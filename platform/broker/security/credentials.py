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


async def read_nodes(broker, users: list[str] | None) -> dict[str, bytes | None]:
    """The node of each user (None: no node); ``users=None``: every user with a node."""
    cluster = getattr(broker, "cluster", None)
    if cluster is not None:
        if users is None:
            users = await cluster.zk.children(USERS_PATH)
        out = {}
        for user in users:
            try:
                out[user] = (await cluster.zk.get_or_none(user_path(user)))[0]
            except ValueError:
                out[user] = None
        return out
    every = _read_file(broker)
    names = list(every) if users is None else users
    return {u: json.dumps(every[u]).encode() if u in every else None for u in names}


async def write_node(broker, user: str, node: bytes) -> None:
    """Store a user's node (ZooKeeper, with Kafka's change notification; standalone: the file)."""
    path = user_path(user)
    cluster = getattr(broker, "cluster", None)
    if cluster is not None:
        zk = cluster.zk

        def write():
            from kazoo.exceptions import NodeExistsError
            if zk.client.exists(path):
                zk.client.set(path, node)
            else:
                zk.client.ensure_path(USERS_PATH)
                try:
                    zk.client.create(path, node)
                except NodeExistsError:
                    zk.client.set(path, node)
            zk.client.ensure_path(CHANGES_PATH)
            zk.client.create(CHANGES_PATH + "/config_change_",
                             json.dumps({"version": 2, "entity_path": f"users/{user}"}).encode(), sequence=True)

        await zk.call(write)
        return
    every = _read_file(broker)
    every[user] = json.loads(node)
    file = Path(broker.config["log.dirs"][0]) / STANDALONE_FILE
    tmp = file.with_suffix(".tmp")
    tmp.write_text(json.dumps(every, indent=1))
    tmp.chmod(0o600)
    tmp.replace(file)


def _read_file(broker) -> dict:
    try:
        return json.loads((Path(broker.config["log.dirs"][0]) / STANDALONE_FILE).read_text())
    except (OSError, ValueError):
        return {}

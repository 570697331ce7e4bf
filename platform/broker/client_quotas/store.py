"""Where quota configs live. Cluster mode: ZooKeeper, as Kafka keeps them: ``/config/<entity path>`` holding
``{"version":1,"config":{"producer_byte_rate":"1048576"}}`` (a user's node also holds its SCRAM credentials,
which are kept), and a ``/config/changes/config_change_`` notification naming the entity, which every broker
watches. Standalone: ``<first log dir>/client-quotas.json``, ``{"<entity path>": {config}}``.

Every broker keeps all quota entities in memory (``ClientQuotaManager.update``) and reads them all again when a
notification arrives: there are few of them, and a full read cannot miss one. Writes are compare-and-set on the
node's version, so two admins altering one entity at once cannot lose a key.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from broker.client_quotas import entities

log = logging.getLogger(__name__)

CONFIG = "/config"
CHANGES_PATH = "/config/changes"
STANDALONE_FILE = "client-quotas.json"
KEEP_NOTIFICATIONS = 100  # older config_change_ nodes are deleted by the writer (Kafka expires them after 15 min)


def _config(data: bytes | None) -> dict:
    if not data:
        return {}
    try:
        config = json.loads(data).get("config", {})
    except (ValueError, AttributeError):
        return {}
    return config if isinstance(config, dict) else {}


def read_all_zk(client, chroot: str = "") -> dict[str, dict]:
    """Every quota entity's config (kazoo, blocking): {entity path: config}."""
    from kazoo.exceptions import NoNodeError

    def children(path):
        try:
            return client.get_children(chroot + path)
        except NoNodeError:
            return []

    def get(path):
        try:
            return _config(client.get(chroot + path)[0])
        except NoNodeError:
            return {}

    out = {}
    for root in ("users", "clients", "ips"):
        for name in children(f"{CONFIG}/{root}"):
            out[f"{root}/{name}"] = get(f"{CONFIG}/{root}/{name}")
            if root == "users":
                for client_id in children(f"{CONFIG}/users/{name}/clients"):
                    out[f"users/{name}/clients/{client_id}"] = get(f"{CONFIG}/users/{name}/clients/{client_id}")
    return {path: config for path, config in out.items() if entities.quota_values(path, config)}


def alter_zk(client, path: str, ops, validate_only: bool, chroot: str = "") -> None:
    """Apply ``ops`` to one entity (kazoo, blocking), compare-and-set; raises QuotaError before any write."""
    from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

    node = f"{chroot}{CONFIG}/{path}"
    while True:
        try:
            data, stat = client.get(node)
            version = stat.version
        except NoNodeError:
            data, version = None, -1
        try:
            whole = json.loads(data) if data else {}
            if not isinstance(whole, dict):
                whole = {}
        except ValueError:
            whole = {}
        config = entities.altered(path, _config(data), ops)
        if validate_only:
            return
        body = json.dumps({**whole, "version": 1, "config": config}, separators=(",", ":")).encode()
        try:
            if version < 0:
                client.ensure_path(node.rsplit("/", 1)[0])
                client.create(node, body)
            else:
                client.set(node, body, version=version)
            break
        except (BadVersionError, NodeExistsError):
            continue  # someone else wrote it meanwhile: read again
    client.ensure_path(chroot + CHANGES_PATH)
    client.create(chroot + CHANGES_PATH + "/config_change_",
                  json.dumps({"version": 2, "entity_path": path}).encode(), sequence=True)
    try:
        old = sorted(client.get_children(chroot + CHANGES_PATH))[:-KEEP_NOTIFICATIONS]
        for name in old:
            client.delete(f"{chroot}{CHANGES_PATH}/{name}")
    except NoNodeError:
        pass


def _file(log_dir: str) -> Path:
    return Path(log_dir) / STANDALONE_FILE


def read_all_file(log_dir: str) -> dict[str, dict]:
    try:
        stored = json.loads(_file(log_dir).read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.error("client quotas: cannot read %s: %s (no quota applies)", _file(log_dir), exc)
        return {}
    return {path: config for path, config in stored.items()
            if isinstance(config, dict) and entities.quota_values(path, config)}


def alter_file(log_dir: str, path: str, ops, validate_only: bool) -> None:
    every = read_all_file(log_dir)
    config = entities.altered(path, every.get(path, {}), ops)
    if validate_only:
        return
    if entities.quota_values(path, config):
        every[path] = config
    else:
        every.pop(path, None)
    file = _file(log_dir)
    tmp = file.with_suffix(".tmp")
    tmp.write_text(json.dumps(every, indent=1, sort_keys=True))
    tmp.replace(file)

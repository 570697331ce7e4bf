"""ACLs in ZooKeeper, in Kafka's layout (see acl_codec): read all, add/remove with compare-and-set on the znode
version, a sequential change notification per changed resource, and a children watch on both change roots so
a broker's cache reloads on change (no polling per request). Notifications older than 15 minutes are deleted when
changes are read (:meth:`purge_changes`, Kafka's ``ZkNodeChangeNotificationListener.purgeObsoleteNotifications``),
so they do not pile up in ZooKeeper. Blocking kazoo calls: run them off the event loop.
"""

from __future__ import annotations

import time
from collections import defaultdict

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from broker.security import acl_codec
from broker.security.authorizer import LITERAL, PREFIXED, Acl

_ROOTS = ((acl_codec.LITERAL_ROOT, LITERAL), (acl_codec.PREFIXED_ROOT, PREFIXED))
CHANGE_EXPIRATION_MS = 15 * 60 * 1000  # Kafka's ZkNodeChangeNotificationListener.changeExpirationMs


class AclZkStore:
    def __init__(self, zk):
        self.zk = zk

    def load(self) -> set[Acl]:
        acls: set[Acl] = set()
        for root, pattern in _ROOTS:
            for rtype in self._children(root):
                for znode in self._children(f"{root}/{rtype}"):
                    try:
                        data, _ = self.zk.get(f"{root}/{rtype}/{znode}")
                    except NoNodeError:
                        continue
                    acls.update(acl_codec.decode(rtype, znode, pattern, data))
        return acls

    def _children(self, path: str) -> list[str]:
        try:
            return self.zk.get_children(path)
        except NoNodeError:
            return []

    def add(self, acls) -> None:
        self._change(acls, add=True)

    def remove(self, acls) -> None:
        self._change(acls, add=False)

    def _change(self, acls, add: bool) -> None:
        by_resource = defaultdict(set)
        for a in acls:
            by_resource[(a.resource_type, a.name, a.pattern_type)].add(a)
        for (rtype, name, pattern), wanted in by_resource.items():
            path = acl_codec.resource_path(rtype, name, pattern)
            while True:
                try:
                    data, stat = self.zk.get(path)
                    version = stat.version
                except NoNodeError:
                    data, version = b"", None
                current = set(acl_codec.decode(rtype, path.rsplit("/", 1)[1], pattern, data))
                new = current | wanted if add else current - wanted
                if new == current:
                    break
                try:
                    if version is None:
                        self.zk.create(path, acl_codec.encode(sorted(new, key=repr)), makepath=True)
                    elif new:
                        self.zk.set(path, acl_codec.encode(sorted(new, key=repr)), version=version)
                    else:
                        self.zk.delete(path, version=version)
                except (BadVersionError, NodeExistsError, NoNodeError):
                    continue
                root = acl_codec.changes_root(pattern)
                self.zk.create(f"{root}/{acl_codec.CHANGE_PREFIX}", acl_codec.change_data(rtype, name, pattern),
                               sequence=True, makepath=True)
                break

    def purge_changes(self, max_age_ms: int = CHANGE_EXPIRATION_MS, now_ms: int | None = None) -> int:
        """Delete change notifications created more than ``max_age_ms`` ago (every broker does it; one that
        another broker deleted first is skipped); how many this call deleted."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        deleted = 0
        for root in (acl_codec.LITERAL_CHANGES, acl_codec.PREFIXED_CHANGES):
            for child in self._children(root):
                if not child.startswith(acl_codec.CHANGE_PREFIX):
                    continue
                try:
                    stat = self.zk.exists(f"{root}/{child}")
                    if stat is not None and now_ms - stat.ctime > max_age_ms:
                        self.zk.delete(f"{root}/{child}")
                        deleted += 1
                except NoNodeError:
                    continue
        return deleted

    def watch(self, on_change) -> None:
        """Call ``on_change()`` (from kazoo's thread) whenever a change notification appears."""
        for root in (acl_codec.LITERAL_CHANGES, acl_codec.PREFIXED_CHANGES):
            self.zk.ensure_path(root)
            self.zk.ChildrenWatch(root, lambda _children: on_change())

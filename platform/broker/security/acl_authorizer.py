"""The broker's ACL authorizer at run time (``authorizer.class.name``): the ACLs in memory, their store, and
the answers handlers ask for.

The ACLs live in ZooKeeper in Kafka's layout (cluster mode: :class:`acl_zk_store.AclZkStore` through the
broker's own session) or in a file of the first log dir (standalone: :class:`acl_file_store.AclFileStore`). They
are read once at start-up, before any listener serves, and again whenever a change notification appears (a
children watch, so an ACL added on any broker, or with ``logbus acls --authorizer-properties``, reaches every
broker without polling). Requests read an immutable ``frozenset`` swapped in one assignment on the event loop.

Matching is :func:`authorizer.authorize` (super users, Deny over Allow, wildcards, implied operations,
``allow.everyone.if.no.acl.found``). :meth:`AclAuthorizer.allowed_on_some` is Kafka's authorizeByResourceType
(KIP-679): may the principal do the operation on at least one resource of the type?
"""

from __future__ import annotations

import asyncio
import logging

from broker.security import authorizer as matching
from broker.security.acl_filter import AclFilter

log = logging.getLogger(__name__)
LOGGED_DENIALS = 1000  # distinct denials logged (Kafka's authorizer log), then only counted


class AclAuthorizer:
    def __init__(self, store, super_users: frozenset[str], allow_if_no_acl: bool):
        self.store = store  # load() -> set[Acl]; add/remove (ZooKeeper) or save (file)
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl
        self.acls: frozenset[matching.Acl] = frozenset()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reloading: asyncio.Task | None = None
        self._again = False
        self.denied = 0  # requests refused since start (a number operators watch)
        self._logged: set[tuple] = set()

    @classmethod
    def from_broker(cls, broker) -> AclAuthorizer | None:
        """None without ``authorizer.class.name``: every request is then allowed (Kafka's default)."""
        config = broker.config
        if not config["authorizer.class.name"]:
            return None
        if broker.cluster is not None:
            store = _ZkStoreOnBroker(broker.cluster.zk)
        else:
            from broker.security.acl_file_store import AclFileStore

            store = AclFileStore(broker.log_dirs[0])
        return cls(store, matching.parse_super_users(config["super.users"]),
                   config["allow.everyone.if.no.acl.found"])

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.acls = frozenset(await asyncio.to_thread(self.store.load))
        log.info("ACL authorizer: %d ACLs loaded, super users %s, allow.everyone.if.no.acl.found=%s",
                 len(self.acls), ",".join(sorted(self.super_users)) or "none", self.allow_if_no_acl)
        watch = getattr(self.store, "watch", None)
        if watch is not None:
            await asyncio.to_thread(watch, self._changed_elsewhere)

    def _changed_elsewhere(self) -> None:  # kazoo's thread
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self.reload)

    def reload(self) -> None:
        """Read the store again (coalesced: one read at a time, one more if a change came meanwhile)."""
        if self._reloading is not None and not self._reloading.done():
            self._again = True
            return
        self._reloading = asyncio.get_running_loop().create_task(self._reload())

    async def _reload(self) -> None:
        while True:
            self._again = False
            try:
                acls = frozenset(await asyncio.to_thread(self.store.load))
            except Exception:  # ZooKeeper unreachable for a moment: keep what we have, the next change retries
                log.exception("reloading ACLs failed; the previous %d stay in force", len(self.acls))
                return
            if acls != self.acls:
                log.info("ACLs reloaded: %d", len(acls))
            self.acls = acls
            purge = getattr(self.store, "purge_changes", None)
            if purge is not None:  # old change notifications go, as Kafka's listener deletes them
                try:
                    await asyncio.to_thread(purge)
                except Exception as exc:
                    log.warning("deleting old ACL change notifications failed (the next change retries): %s", exc)
            if not self._again:
                return

    # ---- questions -----------------------------------------------------------------------------------
    def allowed(self, principal: str, host: str, operation: str, resource_type: str, name: str,
                quiet: bool = False) -> bool:
        ok = matching.authorize(self.acls, principal, host, operation, resource_type, name,
                                super_users=self.super_users, allow_if_no_acl=self.allow_if_no_acl)
        if not ok and not quiet:
            self.denied += 1
            key = (principal, host, operation, resource_type, name)
            if key not in self._logged and len(self._logged) < LOGGED_DENIALS:  # once each, as a bounded set
                self._logged.add(key)
                log.info("denied: principal %s from %s may not %s %s:%s", *key)
        return ok

    def allowed_on_some(self, principal: str, host: str, operation: str, resource_type: str) -> bool:
        if principal in self.super_users:
            return True
        of_type = [a for a in self.acls if a.resource_type == resource_type]
        if not of_type:
            return self.allow_if_no_acl

        def applies(a) -> bool:
            return a.operation in (operation, "All") and a.principal in (principal, matching.WILDCARD_PRINCIPAL) \
                and a.host in (host, matching.WILDCARD_HOST)

        denies = [a for a in of_type if a.permission == matching.DENY and applies(a)]
        if any(a.pattern_type == matching.LITERAL and a.name == matching.WILDCARD_RESOURCE for a in denies):
            return False
        for a in of_type:
            if a.permission != matching.ALLOW or not applies(a):
                continue
            if not any(d.name == a.name and d.pattern_type == a.pattern_type
                       or (d.pattern_type == matching.PREFIXED and a.name.startswith(d.name)) for d in denies):
                return True
        return False

    # ---- the ACL APIs --------------------------------------------------------------------------------
    def describe(self, acl_filter: AclFilter) -> list[matching.Acl]:
        return sorted((a for a in self.acls if acl_filter.matches(a)), key=_order)

    async def create(self, acls: list[matching.Acl]) -> None:
        await asyncio.to_thread(self.store.add, acls)
        self.acls = self.acls | set(acls)  # visible to this broker's next request; the watch confirms it

    async def delete(self, filters: list[AclFilter]) -> list[list[matching.Acl]]:
        """The ACLs each filter matched (and removed), in request order."""
        current = frozenset(await asyncio.to_thread(self.store.load))
        matched = [sorted((a for a in current if f.matches(a)), key=_order) for f in filters]
        doomed = {a for group in matched for a in group}
        if doomed:
            await asyncio.to_thread(self.store.remove, doomed)
        self.acls = current - doomed
        return matched


def _order(a: matching.Acl) -> tuple:
    return a.resource_type, a.name, a.pattern_type, a.principal, a.host, a.operation, a.permission


class _ZkStoreOnBroker:
    """The ZooKeeper store over the broker's own kazoo session (created once that session exists)."""

    def __init__(self, zk):
        self._zk = zk

    def _store(self):
        from broker.security.acl_zk_store import AclZkStore

        return AclZkStore(self._zk.client)

    def load(self):
        return self._store().load()

    def add(self, acls):
        self._store().add(acls)

    def remove(self, acls):
        self._store().remove(acls)

    def watch(self, on_change):
        self._store().watch(on_change)

    def purge_changes(self):
        return self._store().purge_changes()

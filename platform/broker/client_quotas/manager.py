"""What a client's requests pay: Kafka's ``ClientQuotaManager`` for ``producer_byte_rate`` (bytes of a Produce
request's records) and ``consumer_byte_rate`` (bytes of a Fetch answer's records; followers are exempt), and its
``ControllerMutationQuotaManager`` for ``controller_mutation_rate`` (partitions created or deleted, in a token
bucket: :class:`MutationQuota`).

The quota of a request is the most specific entity that sets that key, in Kafka's order: user and client id,
user and default client id, user, default user and client id, default user and default client id, default user,
client id, default client id. Clients that share the entity found share its rate; an entity found through a
default gives each user (or client id) a rate of its own (Kafka's metric tags).

Over the quota, the answer carries ``throttle_time_ms`` and the connection is muted that long: no further request
of it is read (KIP-219; Kafka delays the answer itself for Produce below v6 and Fetch below v8, logbus mutes for
every version). A throttled Fetch is answered empty, its bytes taken back from the rate, as Kafka does. A Fetch
asks for at most what the quota allows in its whole window; when its first batch alone is larger (KIP-74 sends
it anyway), the answer carries it, throttled: emptied, that batch would be refused at every try.

``request_percentage`` (Kafka's ``RequestQuotaManager``): the time the broker spends on a client's requests, in
percent of one thread over the quota window. Each request's own running time is measured (decoding, the handler's
steps, encoding; not the time a handler waits: :class:`broker.network.timing.Timed`), as Kafka counts its request
handler and network threads' time. Over the quota (throttle bounded by one quota window, as Kafka's), the answer's
``throttle_time_ms`` is raised to it (the hand-framed Produce and Fetch answers in place) and the connection muted
that long. Exempt, as in Kafka: followers' fetches, the SASL handshake, WriteTxnMarkers.

``connection_creation_rate`` (KIP-612, ``ips/<ip>`` or ``ips/<default>``): each new connection from an IP is
counted against its IP's rate; over it, the connection is not counted and is closed unread after the throttle time
(Kafka's acceptor's delayed close), which is bounded by one quota window.

While no entity sets an enforced key, :attr:`ClientQuotaManager.enabled` is False and requests pay nothing
(the unbatched producer's fast path stays on).
"""

from __future__ import annotations

import asyncio
import logging
import time

from broker.client_quotas import entities, store
from broker.client_quotas.rate import Rate, TokenBucket
from broker.network.quotas import normal_host
from broker.network.session import ANONYMOUS, current_session

log = logging.getLogger(__name__)

MAX_RATES = 10_000  # past this many (key, user, client id) rates, idle ones are dropped


def _user(principal: str) -> str:
    return principal.split(":", 1)[1] if ":" in principal else principal


class ClientQuotaManager:
    def __init__(self, num: int = 11, window_ms: int = 1000, mutation_num: int = 11, mutation_window_ms: int = 1000):
        self.num, self.window_ms = num, window_ms
        self.mutation_num, self.mutation_window_ms = mutation_num, mutation_window_ms
        self.enabled = False  # a byte rate or request quota is set somewhere (the request path pays only then)
        self.requests_enabled = False  # request_percentage
        self.mutations_enabled = False
        self.ip_rates: dict[str, float] = {}  # normalized IP (or DEFAULT) -> connection_creation_rate
        self._buckets: dict[tuple, TokenBucket] = {}
        self.quotas: dict[str, dict[str, float]] = {}  # entity path -> quota values
        self._rates: dict[tuple, Rate] = {}
        self.throttled: dict[str, list] = {}  # key -> [throttled answers, throttle ms in all]

    @classmethod
    def from_config(cls, config) -> "ClientQuotaManager":
        return cls(config["quota.window.num"], config["quota.window.size.seconds"] * 1000,
                   config["controller.quota.window.num"], config["controller.quota.window.size.seconds"] * 1000)

    def update(self, stored: dict[str, dict]) -> None:
        """Take every entity's stored config (the whole set: what is not in it has no quota any more)."""
        quotas = {path: values for path, config in stored.items()
                  if (values := entities.quota_values(path, config))}
        ignored = sorted({key for values in quotas.values() for key in values} - entities.ENFORCED)
        if ignored and ignored != sorted({k for v in self.quotas.values() for k in v} - entities.ENFORCED):
            log.warning("client quotas: %s stored but not enforced by logbus (only %s are)", ", ".join(ignored),
                        ", ".join(sorted(entities.ENFORCED)))
        self.quotas = quotas
        self.requests_enabled = any(entities.REQUEST_PERCENTAGE in values for values in quotas.values())
        self.enabled = self.requests_enabled or any(key in entities.BYTE_RATES for values in quotas.values()
                                                    for key in values)
        self.ip_rates = {}
        for path, values in quotas.items():
            if entities.CONNECTION_CREATION_RATE in values:
                (_, ip), = entities.entity_components(path)
                self.ip_rates[entities.DEFAULT if ip is None else normal_host(ip)] = \
                    values[entities.CONNECTION_CREATION_RATE]
        self.mutations_enabled = any(entities.CONTROLLER_MUTATION_RATE in values for values in quotas.values())
        # rates are kept: a client's bound is looked up at each request, so a changed quota applies at once

    def limit(self, key: str, principal: str, client_id: str | None) -> tuple[float, tuple] | None:
        """(bound, the rate's identity) of the most specific entity setting ``key``; None: no quota."""
        user = entities.sanitize(_user(principal))
        client = entities.sanitize(client_id or "")
        d = entities.DEFAULT
        candidates = (
            (f"users/{user}/clients/{client}", (user, client)),
            (f"users/{user}/clients/{d}", (user, client)),
            (f"users/{user}", (user, "")),
            (f"users/{d}/clients/{client}", (user, client)),
            (f"users/{d}/clients/{d}", (user, client)),
            (f"users/{d}", (user, "")),
            (f"clients/{client}", ("", client)),
            (f"clients/{d}", ("", client)),
        )
        quotas = self.quotas
        for path, tags in candidates:
            values = quotas.get(path)
            if values is not None and key in values:
                return values[key], tags
        return None

    def _rate(self, key: str, tags: tuple) -> Rate:
        rate = self._rates.get((key, tags))
        if rate is None:
            if len(self._rates) >= MAX_RATES:
                self._rates = {k: r for k, r in self._rates.items() if r.measure(time.monotonic() * 1000) > 0}
            rate = self._rates[(key, tags)] = Rate(self.num, self.window_ms)
        return rate

    def record(self, key: str, principal: str, client_id: str | None, value: float,
               now_ms: float | None = None) -> int:
        """Record ``value`` against the client's quota for ``key``; the throttle time in ms (0: within it)."""
        found = self.limit(key, principal, client_id)
        if found is None:
            return 0
        bound, tags = found
        now = time.monotonic() * 1000 if now_ms is None else now_ms
        rate = self._rate(key, tags)
        rate.record(value, now)
        return rate.throttle_ms(bound, now)

    def unrecord(self, key: str, principal: str, client_id: str | None, value: float,
                 now_ms: float | None = None) -> None:
        found = self.limit(key, principal, client_id)
        if found is not None:
            self._rate(key, found[1]).record(-value, time.monotonic() * 1000 if now_ms is None else now_ms)

    def max_in_window(self, key: str, principal: str, client_id: str | None) -> int | None:
        found = self.limit(key, principal, client_id)
        if found is None:
            return None
        return max(int(self._rate(key, found[1]).max_in_window(found[0])), 1)

    def record_request(self, principal: str, client_id: str | None, seconds: float, session,
                       now_ms: float | None = None) -> int:
        """A request that ran ``seconds`` of the broker's time: the throttle time in ms (bounded by one quota
        window; the connection is muted that long), 0 within ``request_percentage`` or without one."""
        throttle = self.record(entities.REQUEST_PERCENTAGE, principal, client_id, seconds * 100.0, now_ms)
        if throttle:
            throttle = min(throttle, self.window_ms)
            self.throttle(entities.REQUEST_PERCENTAGE, throttle, session)
        return throttle

    def connection_throttle(self, ip: str, now_ms: float | None = None) -> int:
        """A new connection from ``ip``: 0 when within its ``connection_creation_rate`` (counted) or without one;
        over it, the milliseconds after which it is to be closed unread (not counted), bounded by one window."""
        ip = normal_host(ip)
        bound = self.ip_rates.get(ip) or self.ip_rates.get(entities.DEFAULT)
        if bound is None:
            return 0
        now = time.monotonic() * 1000 if now_ms is None else now_ms
        rate = self._rate(entities.CONNECTION_CREATION_RATE, (ip,))
        rate.record(1.0, now)
        throttle = rate.throttle_ms(bound, now)
        if throttle:
            rate.record(-1.0, now)  # Kafka: a connection it does not accept is not counted
            throttle = min(throttle, self.window_ms)
            self._count(entities.CONNECTION_CREATION_RATE, throttle)
        return throttle

    def mutation_quota(self, principal: str, client_id: str | None, strict: bool) -> "MutationQuota | None":
        """The controller mutation quota of one CreateTopics / CreatePartitions / DeleteTopics request; None: the
        client has none."""
        found = self.limit(entities.CONTROLLER_MUTATION_RATE, principal, client_id) if self.mutations_enabled else None
        if found is None:
            return None
        bound, tags = found
        bucket = self._buckets.get(tags)
        if bucket is None:
            bucket = self._buckets[tags] = TokenBucket(self.mutation_num, self.mutation_window_ms)
        return MutationQuota(bucket, bound, strict)

    def throttle(self, key: str, ms: int, session) -> None:
        """An answer throttles its client ``ms`` (> 0) for ``key``: counted, and the connection muted that long."""
        self._count(key, ms)
        mute(session, ms)

    def _count(self, key: str, ms: int) -> None:
        entry = self.throttled.setdefault(key, [0, 0])
        entry[0] += 1
        entry[1] += ms


class MutationQuota:
    """Kafka's ``StrictControllerMutationQuota`` (CreateTopics v6+, CreatePartitions v3+, DeleteTopics v5+: a
    mutation is refused with THROTTLING_QUOTA_EXCEEDED while the bucket is below zero, and any mutation is taken
    while it is not) or ``PermissiveControllerMutationQuota`` (older versions: every mutation taken, the answer
    throttled once the bucket is below zero)."""

    def __init__(self, bucket: TokenBucket, bound: float, strict: bool):
        self.bucket, self.bound, self.strict = bucket, bound, strict
        self.throttle = 0

    def exceeded(self) -> bool:
        """Strict: whether the next mutation must be refused (the throttle time is kept for the answer)."""
        if not self.strict:
            return False
        wait = self.bucket.throttle_ms(self.bound, time.monotonic() * 1000)
        self.throttle = max(self.throttle, wait)
        return wait > 0

    def record(self, partitions: int) -> None:
        now = time.monotonic() * 1000
        self.bucket.record(partitions, self.bound, now)
        if not self.strict:
            self.throttle = max(self.throttle, self.bucket.throttle_ms(self.bound, now))


def mutation_quota(broker, header, strict_since: int) -> MutationQuota | None:
    """A CreateTopics / CreatePartitions / DeleteTopics request's controller mutation quota (None: none)."""
    if not broker.client_quotas.mutations_enabled:
        return None
    return broker.client_quotas.mutation_quota(requester()[1], header.client_id,
                                               header.api_version >= strict_since)


def mutations_throttle(broker, quota: MutationQuota | None) -> int:
    """The answer's throttle time for a mutation quota; the connection muted that long."""
    if quota is None or not quota.throttle:
        return 0
    broker.client_quotas.throttle(entities.CONTROLLER_MUTATION_RATE, quota.throttle, current_session.get())
    return quota.throttle


def requester() -> tuple:
    """(session, principal) of the connection whose request is being handled."""
    session = current_session.get()
    return session, session.principal if session is not None else ANONYMOUS


def mute(session, ms: int) -> None:
    """Read nothing more from the connection for ``ms`` (the listener waits before its next frame)."""
    if session is not None and ms > 0:
        session.muted_until = max(session.muted_until, time.monotonic() + ms / 1000)


class QuotaWatcher:
    """Keeps a broker's :class:`ClientQuotaManager` current: at start, and (cluster mode) on every change
    notification under ``/config/changes``; a read that fails is retried."""

    def __init__(self, broker):
        self.broker = broker
        self._dirty = False
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        cluster = self.broker.cluster
        if cluster is None:
            self.reload_file()
            return
        try:
            await self._reload()
        except Exception as exc:  # noqa: BLE001 - the broker serves; the quotas come with a retry
            log.warning("client quotas: reading them from ZooKeeper failed (%s); retrying", exc)
            self.kick()
        await cluster.zk.watch_children(store.CHANGES_PATH, lambda _children: self.kick())

    def reload_file(self) -> None:
        self.broker.client_quotas.update(store.read_all_file(self.broker.log_dirs[0]))

    def kick(self) -> None:
        self._dirty = True
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._reload_while_dirty())

    async def _reload_while_dirty(self) -> None:
        delay = 0.1
        while self._dirty:
            self._dirty = False
            try:
                await self._reload()
                delay = 0.1
            except Exception as exc:  # noqa: BLE001 - ZooKeeper away: keep the quotas known, retry
                log.warning("client quotas: reading them from ZooKeeper failed (%s); retrying", exc)
                self._dirty = True
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def _reload(self) -> None:
        zk = self.broker.cluster.zk
        self.broker.client_quotas.update(await zk.call(store.read_all_zk, zk.client))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

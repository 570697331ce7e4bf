"""Transaction markers: writing one into a partition this broker leads (WriteTxnMarkers' handler and the
coordinator's fast path share :func:`write_marker`), and :class:`MarkerSender`, the coordinator side that gets
a transaction's markers into every partition of it, local or on other brokers (WriteTxnMarkers v1).

A partition keeps being retried (leadership moving, not enough replicas, a full disk, a broker down) until its
marker is written, it is superseded (INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED: a newer marker
is already there), its topic is deleted, or the coordinator stops coordinating the transaction (``alive()``).
"""

from __future__ import annotations

import asyncio
import logging
import time

from broker.log.producer_state import CoordinatorFenced, InvalidProducerEpoch
from broker.log.storage_errors import incidents, log_dir_of
from broker.protocol import codec
from broker.protocol.messages import ErrorCode
from broker.txn.metadata import GROUP_PREFIX

log = logging.getLogger(__name__)
WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION = 27, 1
RETRY_S = 0.2
DONE = {ErrorCode.none, ErrorCode.invalid_producer_epoch, ErrorCode.transaction_coordinator_fenced,
        ErrorCode.unknown_topic_or_partition}  # written, superseded, or gone: nothing left to do
MARKER_ACK_TIMEOUT_S = 30


async def write_marker(broker, topic: str, partition: int, producer_id: int, producer_epoch: int, commit: bool,
                       coordinator_epoch: int) -> ErrorCode:
    """Append a marker to a partition this broker leads and wait until it is committed (all of the ISR). For a
    group's pseudo-partition (``__consumer_offsets:<group>``) this broker must coordinate the group: the offsets
    the transaction committed for it are applied or dropped."""
    if topic.startswith(GROUP_PREFIX):
        return await broker.txn.offsets.complete(topic[len(GROUP_PREFIX):], producer_id, commit)
    info = broker.topics.get(topic)
    if info is None or not 0 <= partition < info.partitions:
        return ErrorCode.unknown_topic_or_partition
    error, plog = broker.leader_log(topic, partition)
    if plog is None:
        return error
    try:
        offset = plog.append_marker(producer_id, producer_epoch, coordinator_epoch, commit, int(time.time() * 1000))
    except InvalidProducerEpoch:
        return ErrorCode.invalid_producer_epoch
    except CoordinatorFenced:
        return ErrorCode.transaction_coordinator_fenced
    except OSError as exc:
        incidents.failed(f"appends to {log_dir_of(plog.dir)}", exc, f"{topic}-{partition}")
        return ErrorCode.kafka_storage_error
    if broker.cluster is None:
        broker.notify_append(topic, partition)
        return ErrorCode.none
    part = broker.cluster.partition(topic, partition)
    part.maybe_advance_high_watermark()
    broker.notify_append(topic, partition)
    return await part.wait_committed(offset + 1, MARKER_ACK_TIMEOUT_S)


class MarkerSender:
    def __init__(self, broker):
        self.broker = broker
        self._clients: dict[int, object] = {}

    def _leader(self, topic: str, partition: int) -> int:
        if topic.startswith(GROUP_PREFIX):
            return self.broker.groups.coordinator_id(topic[len(GROUP_PREFIX):])
        if self.broker.cluster is None:
            return self.broker.node_id
        state = self.broker.cluster.metadata.state(topic, partition)
        return state.leader if state is not None else -1

    async def send(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                   partitions: dict[str, set[int]], alive) -> bool:
        """Write the markers of one transaction; True once every partition is done, False if ``alive()`` turned
        false first (this broker no longer coordinates the transaction)."""
        left = {(t, p) for t, parts in partitions.items() for p in parts}
        while left:
            if not alive():
                return False
            by_leader: dict[int, list[tuple[str, int]]] = {}
            for key in sorted(left):
                by_leader.setdefault(self._leader(*key), []).append(key)
            for leader, keys in by_leader.items():
                if leader is None or leader < 0:
                    continue
                if leader == self.broker.node_id:
                    results = [(key, await write_marker(self.broker, *key, producer_id, producer_epoch, commit,
                                                        coordinator_epoch)) for key in keys]
                else:
                    results = await self._remote(leader, keys, producer_id, producer_epoch, commit,
                                                 coordinator_epoch)
                for key, error in results:
                    if error in DONE:
                        left.discard(key)
                    else:
                        log.debug("marker for %s-%d: %s, retrying", key[0], key[1], error.name)
            if left:
                await asyncio.sleep(RETRY_S)
        return True

    async def _remote(self, leader: int, keys, producer_id, producer_epoch, commit, coordinator_epoch):
        from broker.cluster.broker_client import BrokerClient

        client = self._clients.get(leader)
        if client is None:
            client = self._clients[leader] = BrokerClient(self.broker, leader, f"txn-markers-{self.broker.node_id}")
        req = codec.request_type(WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION)
        mod = __import__(req.__module__, fromlist=["WritableTxnMarker", "WritableTxnMarkerTopic"])
        topics: dict[str, list[int]] = {}
        for topic, partition in keys:
            topics.setdefault(topic, []).append(partition)
        body = req(markers=(mod.WritableTxnMarker(
            producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=commit,
            topics=tuple(mod.WritableTxnMarkerTopic(name=t, partition_indexes=tuple(ps)) for t, ps in topics.items()),
            coordinator_epoch=coordinator_epoch),))
        try:
            response = await client.call(WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, body, MARKER_ACK_TIMEOUT_S + 5)
        except (OSError, ConnectionError, asyncio.TimeoutError, asyncio.IncompleteReadError) as exc:
            log.info("WriteTxnMarkers to broker %d failed: %s", leader, exc)
            return [(key, ErrorCode.request_timed_out) for key in keys]
        out = []
        for marker in response.markers:
            for topic in marker.topics:
                for p in topic.partitions:
                    out.append(((topic.name, p.partition_index), ErrorCode(int(p.error_code))))
        return out

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()

"""A mirror stream that moves whole record batches (the default for PLAINTEXT clusters; ``--copy records`` and
secured clusters use the librdkafka record path of :mod:`mirror.mirror`).

The source group still decides which stream owns which partitions: the stream's librdkafka consumer joins
``logbus-mirror-<source>``, and its assigned partitions are paused at once, so librdkafka never fetches them; it
only keeps the membership, answers rebalances and commits offsets. The data moves over the stream's own
connections (:mod:`mirror.wire`): a Fetch (``read_committed``) to each source leader of the owned partitions,
the fetched bytes rewritten by :mod:`mirror.batches` (provenance headers, no loops, markers and aborted records
dropped), and one Produce (``acks=all``) per target leader, one batch per partition, in order. Only once the
target acknowledged a partition's batches does its source position move, and committed positions are always
acknowledged ones: at-least-once, as the record path.

A partition keeps its number on the target when the partition counts match; otherwise source partition ``p``
goes to ``p mod n`` (per-partition order kept). Faults: leadership moves and unreachable brokers on either side
are retried in place with backoff (the batch is sent again: a duplicate at most, never a gap or a reordering), and
so are the look-ups of a newly assigned partition whose leader the source's metadata does not show yet (a topic
created a moment ago; :func:`mirror.mirror.stoppable`); other refusals and corrupt source bytes raise, and the
stream restarts from the committed offsets (:meth:`mirror.mirror.Mirror._stream`).
"""

from __future__ import annotations

import logging

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaException, TopicPartition

from broker.protocol import produce_request
from broker.protocol.messages import ErrorCode
from mirror.batches import MAX_BATCH_BYTES, Provenance, copy_fetched
from mirror.mirror import source_event, stoppable
from mirror.wire import FETCH, FETCH_VERSION, Pool, read_committed_fetches, receive_each

log = logging.getLogger(__name__)
PRODUCE, PRODUCE_VERSION = 0, 8
API_TIMEOUT_S = 60
RETRY = {ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available, ErrorCode.unknown_topic_or_partition,
         ErrorCode.request_timed_out, ErrorCode.not_enough_replicas, ErrorCode.not_enough_replicas_after_append,
         ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch, ErrorCode.kafka_storage_error,
         ErrorCode.network_exception, ErrorCode.not_controller}
Key = tuple[str, int]


class BatchStream:
    def __init__(self, mirror, index: int, backoff):
        self.m = mirror
        self.index = index
        self.backoff = backoff
        self.failed = False
        self.held = False  # a refused commit holds the copy (at-least-once: duplicates stay within one round)
        client_id = f"logbus-mirror-{mirror.source_name}-{index}"
        self.source = Pool(client_id)
        self.target = Pool(client_id)
        self.consumer: Consumer | None = None
        self.positions: dict[Key, int] = {}  # next source offset to fetch, per owned partition
        self.uncommitted: dict[Key, int] = {}  # acknowledged on the target, not yet committed on the source
        self.source_leader: dict[Key, int] = {}
        self.target_leader: dict[Key, int] = {}
        self.target_of: dict[Key, int] = {}  # target partition of a source partition
        self.provenance: dict[Key, Provenance] = {}
        self.assigned: list[TopicPartition] = []
        self.prefetched: list[tuple[int, dict[Key, int]]] = []  # the next cycle's fetch, sent, not yet received
        conf = mirror.consumer_config
        self.reset = str(conf.get("auto.offset.reset", "earliest")).lower()
        # the consumer's own fetch settings (librdkafka's names); a partition's share of a cycle is also the most
        # that a crash makes the next run copy again
        self.partition_fetch_bytes = int(conf.get("max.partition.fetch.bytes", 1 << 20))
        self.fetch_max_bytes = int(conf.get("fetch.max.bytes", 50 << 20))
        # at most what one partition's answer can hold: a leader of a single partition could never reach more, and
        # every fetch would wait out fetch.wait.max.ms even with a backlog
        self.fetch_min_bytes = min(int(conf.get("fetch.min.bytes", 1)), self.partition_fetch_bytes,
                                   self.fetch_max_bytes)
        self.fetch_wait_ms = int(conf.get("fetch.wait.max.ms", 100))
        # target batches no larger than a partition's fetch share: offsets are committed after each produce round,
        # so a crash re-copies at most about this much per partition even when the source's batches are larger
        self.batch_bytes = min(MAX_BATCH_BYTES, self.partition_fetch_bytes)

    # ---- group membership (librdkafka) ------------------------------------------------------------------------
    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        consumer.assign(partitions)
        if partitions:
            consumer.pause(partitions)
        self.assigned = list(partitions)
        self.held = False

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._commit()  # what the target has: the next owner starts after it
        for tp in partitions:
            key = (tp.topic, tp.partition)
            for table in (self.positions, self.uncommitted, self.source_leader, self.target_of):
                table.pop(key, None)
        self.assigned = []
        consumer.unassign()

    def _start_assigned(self) -> None:
        """Positions of newly assigned partitions (committed, else auto.offset.reset) and their targets."""
        fresh = [tp for tp in self.assigned if (tp.topic, tp.partition) not in self.positions
                 and self.m.wanted(tp.topic)]
        self.assigned = []
        if not fresh:
            return
        for tp in self._starting_offsets(fresh):
            key = (tp.topic, tp.partition)
            offset = tp.offset
            if offset < 0 or tp.offset in (OFFSET_BEGINNING, OFFSET_END):
                low, high = stoppable(lambda t, tp=tp: self.consumer.get_watermark_offsets(
                    TopicPartition(tp.topic, tp.partition), t), self.m.stop_event, API_TIMEOUT_S)
                offset = high if self.reset in ("latest", "largest", "end") else low
            self.positions[key] = offset
            self.provenance[key] = Provenance(self.m.source_name, tp.partition)
            source_count = self.m._source_partitions(self.consumer, tp.topic)
            target_count = self.m.ensure_target(tp.topic, source_count)  # created now, not on the first record
            self.target_of[key] = tp.partition if target_count == source_count else tp.partition % target_count
        log.info("mirror stream %d copies %s", self.index, ", ".join(f"{t}-{p}@{self.positions[(t, p)]}"
                                                                     for t, p in sorted(self.positions)))
        self._refresh_source()
        self._refresh_target()

    def _starting_offsets(self, fresh: list[TopicPartition]) -> list[TopicPartition]:
        """The committed offsets. A partition answered with an error (librdkafka puts it in ``tp.error`` instead of
        raising) is raised inside the look-up: asked again if transient (:func:`mirror.mirror.stoppable`), else the
        stream fails. Read as "nothing committed", it would start at ``auto.offset.reset``."""
        def committed(timeout: float) -> list[TopicPartition]:
            got = self.consumer.committed(fresh, timeout)
            for tp in got:
                if tp.error is not None:
                    raise KafkaException(tp.error)
            return got

        return stoppable(committed, self.m.stop_event, API_TIMEOUT_S)

    def _encode(self, key: Key, batch) -> list:
        return batch.encode_parts()

    def _round_done(self) -> None:
        """A produce round inside a cycle was acknowledged (not the cycle's last)."""
        self._commit()

    def _transactional_id(self) -> str | None:
        return None

    def _before_produce(self, plan: dict) -> None:
        """Called before a cycle's batches go out (the transactional stream opens its transaction here)."""

    # ---- metadata ---------------------------------------------------------------------------------------------
    def _refresh_source(self) -> None:
        md = stoppable(lambda t: self.consumer.list_topics(timeout=t), self.m.stop_event, API_TIMEOUT_S)
        self.source.addresses = {b.id: (b.host, b.port) for b in md.brokers.values()}
        for topic, partition in self.positions:
            t = md.topics.get(topic)
            p = t.partitions.get(partition) if t is not None else None
            self.source_leader[(topic, partition)] = p.leader if p is not None else -1

    def _refresh_target(self) -> None:
        md = stoppable(lambda t: self.m.target_admin.list_topics(timeout=t), self.m.stop_event, API_TIMEOUT_S)
        self.target.addresses = {b.id: (b.host, b.port) for b in md.brokers.values()}
        self.target_leader = {}
        for topic in {t for t, _ in self.target_of}:
            t = md.topics.get(topic)
            for index, p in (t.partitions.items() if t is not None else ()):
                self.target_leader[(topic, index)] = p.leader

    # ---- the loop ---------------------------------------------------------------------------------------------
    def run(self) -> None:
        m = self.m
        self.consumer = m.new_consumer()
        self.consumer.subscribe([f"^({m.whitelist.pattern})$"], on_assign=self._on_assign,
                                on_revoke=self._on_revoke)
        while not m.stop_event.is_set():
            event = self.consumer.poll(0 if self.positions else 0.1)  # rebalances; paused partitions: no records
            if event is not None:
                source_event(event)  # an error event is logged (a fatal one raises); no record comes this way
            if self.assigned:
                self._start_assigned()
            if not self.positions:
                continue
            if self.held:  # the last commit was refused: copy nothing more until it goes through or the
                self._commit()  # group moves the partitions (a member the group dropped would copy in vain)
                if self.held:
                    self.m.stop_event.wait(0.1)
                    continue
            if self._cycle():
                self.backoff.reset()
            self._commit()

    def close(self) -> None:
        try:
            self._commit()
        except Exception as exc:  # noqa: BLE001 - closing after a failure
            log.warning("mirror stream %d: final commit: %s", self.index, exc)
        self.source.close()
        self.target.close()
        if self.consumer is not None:
            try:
                self.consumer.close()
            except Exception as exc:  # noqa: BLE001
                log.warning("closing the source consumer: %s", exc)

    def _cycle(self) -> bool:
        """One fetch from every source leader and the copy of what came back; True if records were copied. While
        a cycle's batches are produced, the next cycle's fetch is already on its way (sent with the positions the
        cycle will have once the target acknowledged; dropped if they turn out otherwise)."""
        fetched = self._receive_fetches(self.prefetched) if self.prefetched else self._fetch()
        self.prefetched = []
        plan: dict[Key, list] = {}
        results = {}
        for key, data in fetched.items():
            copied = copy_fetched(data.records or b"", self.positions[key],
                                  [(a.producer_id, a.first_offset) for a in data.aborted_transactions or ()],
                                  self.provenance[key], self.batch_bytes)
            stable = data.last_stable_offset if data.last_stable_offset >= 0 else data.high_watermark
            with self.m.counters.lock:
                self.m.counters.lag[f"{key[0]}-{key[1]}"] = max(stable - copied.next_offset, 0)
            if copied.batches:
                plan[key] = copied.batches
                results[key] = copied
            elif copied.next_offset > self.positions[key]:  # only markers, aborted records or copies: consumed
                self.positions[key] = self.uncommitted[key] = copied.next_offset
        if not plan:
            return False
        self.prefetched = self._send_fetches({**self.positions, **{k: c.next_offset for k, c in results.items()}})
        self._before_produce(plan)
        produced = self._produce(plan)
        if produced is None:
            return False  # stopping before the target acknowledged: nothing moves
        targets, rounds = produced
        records = value_bytes = skipped = 0
        for key, copied in results.items():
            done = copied.batches[:rounds]
            if len(done) == len(copied.batches):
                self.positions[key] = self.uncommitted[key] = copied.next_offset
                records += copied.records
                value_bytes += copied.value_bytes
                skipped += copied.skipped_loops
            else:  # the cycle stopped early: positions are those of its acknowledged rounds (set by _produce)
                done_records = sum(b.count for b in done)
                records += done_records
                value_bytes += copied.value_bytes * done_records // max(copied.records, 1)  # a share, for the rate
            self.m.checkpoints.record(key[0], key[1], done[-1].last_source_offset, targets[key])
        self.m.checkpoints.maybe_flush()
        with self.m.counters.lock:
            self.m.counters.records += records
            self.m.counters.bytes += value_bytes
            self.m.counters.skipped_loops += skipped
            self.m.counters.batches += 1
        return True

    def _fetch(self) -> dict:
        return self._receive_fetches(self._send_fetches(self.positions))

    def _send_fetches(self, positions: dict[Key, int]) -> list[tuple[int, dict[Key, int]]]:
        """One Fetch to each source leader of ``positions``; returns (leader, the offsets asked) per request sent."""
        requests = read_committed_fetches(positions, self.source_leader, partition_bytes=self.partition_fetch_bytes,
                                          wait_ms=self.fetch_wait_ms, min_bytes=self.fetch_min_bytes,
                                          max_bytes=self.fetch_max_bytes)
        if not requests:
            self._source_trouble(None, "no leader known")
            return []
        sent = []
        for leader, (request, asked) in requests.items():
            try:
                self.source.get(leader).send(FETCH, FETCH_VERSION, request)
                sent.append((leader, asked))
            except (OSError, ConnectionError) as exc:
                self._source_trouble(leader, exc)
        return sent

    def _receive_fetches(self, sent: list[tuple[int, dict[Key, int]]]) -> dict:
        """{partition: PartitionData} with data or nothing new, for the partitions still at the offset asked;
        errors handled (retried next cycle)."""
        out = {}
        asked_of = dict(sent)
        for leader, response in receive_each(self.source, asked_of, self._source_trouble):
            asked = asked_of[leader]
            for topic in response.responses:
                for p in topic.partitions:
                    key = (topic.topic, p.partition_index)
                    if key not in self.positions or self.positions[key] != asked.get(key):
                        continue  # revoked, or moved since (a prefetch made before a reset)
                    error = ErrorCode(p.error_code)
                    if error == ErrorCode.none:
                        out[key] = p
                    elif error == ErrorCode.offset_out_of_range:
                        low, high = p.log_start_offset, p.high_watermark
                        if low < 0 or high < 0:  # Kafka's answer carries -1 there: ListOffsets
                            try:
                                low, high = self.consumer.get_watermark_offsets(TopicPartition(*key), timeout=10)
                            except KafkaException as exc:
                                self._source_trouble(None, f"{key[0]}-{key[1]}: out of range, watermarks: {exc}")
                                continue
                        reset = high if self.reset in ("latest", "largest", "end") else low
                        log.warning("%s-%d: offset %d out of range; resetting to %d (auto.offset.reset=%s)",
                                    key[0], key[1], self.positions[key], reset, self.reset)
                        self.positions[key] = reset
                    elif error in RETRY:
                        self._source_trouble(None, f"{key[0]}-{key[1]}: {error.name}")
                    else:
                        raise KafkaException(f"fetch of {key[0]}-{key[1]} refused: {error.name}")
        return out

    def _source_trouble(self, leader: int | None, reason) -> None:
        log.info("mirror stream %d: source: %s; refreshing metadata", self.index, reason)
        if leader is not None:
            self.source.drop(leader)
        self.m.stop_event.wait(min(self.backoff.next(), 2.0))
        try:
            self._refresh_source()
        except KafkaException as exc:
            log.warning("mirror stream %d: source metadata: %s", self.index, exc)

    def _produce(self, plan: dict[Key, list]) -> tuple[dict[Key, int], int] | None:
        """Produce every partition's batches in order (round k: the k-th batch of each partition); returns the
        target offset of each partition's last acknowledged record and the number of rounds acknowledged, or None
        when told to stop first. Retries in place. A round whose commit the group refuses ends the cycle: the
        member may have been dropped (a WAN cut longer than the session), and what it copied on would only be
        copied again by the partitions' next owner."""
        targets: dict[Key, int] = {}
        rounds = max(len(batches) for batches in plan.values())
        for k in range(rounds):
            todo = {key: batches[k] for key, batches in plan.items() if k < len(batches)}
            encoded = {key: self._encode(key, batch) for key, batch in todo.items()}
            while todo:
                if self.m.stop_event.is_set():
                    return None
                failed = self._produce_round(todo, encoded, targets)
                for key in list(todo):
                    if key not in failed:
                        del todo[key]
                if todo:
                    delay = self.backoff.next()
                    log.info("mirror stream %d: target refused %d partition(s) for now (%s); retrying in %.1f s",
                             self.index, len(todo), next(iter(failed.values())), delay)
                    self.m.stop_event.wait(delay)
                    try:
                        self._refresh_target()
                    except KafkaException as exc:
                        log.warning("mirror stream %d: target metadata: %s", self.index, exc)
            if k < rounds - 1:  # the records of this round are on the target: their offsets can be committed
                for key, batches in plan.items():
                    if k < len(batches) - 1:
                        self.positions[key] = self.uncommitted[key] = batches[k].last_source_offset + 1
                self._round_done()
                if self.held:
                    return targets, k + 1
        return targets, rounds

    def _produce_round(self, todo: dict, encoded: dict, targets: dict) -> dict[Key, str]:
        """Send one batch per partition; returns the partitions to retry, with why."""
        failed: dict[Key, str] = {}
        by_leader: dict[int, dict[str, list]] = {}
        for key in todo:
            target_partition = self.target_of[key]
            leader = self.target_leader.get((key[0], target_partition), -1)
            if leader < 0:
                failed[key] = "no leader"
                continue
            by_leader.setdefault(leader, {}).setdefault(key[0], []).append((key, target_partition))
        sent = []
        txn_id = self._transactional_id()
        for leader, topics in by_leader.items():
            data = [(t, [(index, encoded[key]) for key, index in ps]) for t, ps in topics.items()]
            try:
                self.target.get(leader).send_parts(PRODUCE, PRODUCE_VERSION, lambda correlation, client_id, data=data:
                                                   produce_request.encode_parts(PRODUCE_VERSION, correlation,
                                                                                client_id, txn_id, -1, 30_000, data))
                sent.append(leader)
            except (OSError, ConnectionError) as exc:
                self.target.drop(leader)
                failed.update({key: str(exc) for ps in topics.values() for key, _ in ps})
        for leader in sent:
            topics = by_leader[leader]
            try:
                response = self.target.connections[leader].receive()
            except (OSError, ConnectionError) as exc:
                self.target.drop(leader)
                failed.update({key: str(exc) for ps in topics.values() for key, _ in ps})
                continue
            answers = {(t.name, p.index): p for t in response.responses for p in t.partition_responses}
            for ps in topics.values():
                for key, index in ps:
                    answer = answers.get((key[0], index))
                    error = ErrorCode(answer.error_code) if answer is not None else ErrorCode.unknown_server_error
                    if error == ErrorCode.none:
                        targets[key] = answer.base_offset + todo[key].count - 1
                    elif error in RETRY:
                        failed[key] = error.name
                    else:
                        raise KafkaException(f"target refused {todo[key].count} record(s) of {key[0]}-{key[1]}: "
                                             f"{error.name}")
        return failed

    def _commit(self) -> None:
        """Commit the acknowledged positions, after every cycle that moved them (synchronously: librdkafka may hold
        an asynchronous commit for a while, and a crash meanwhile would copy everything since again). A refused
        commit keeps them for the next one (:meth:`mirror.mirror.Mirror._commit`)."""
        if self.uncommitted and self.consumer is not None:
            self.m._commit(self.consumer, self.uncommitted)
            self.held = bool(self.uncommitted)  # refused (kept for the next try): hold the copy meanwhile


def run_stream(mirror, index: int, backoff) -> None:
    if mirror.exactly_once:
        from mirror.txn_stream import TransactionalBatchStream as Stream
    else:
        Stream = BatchStream
    stream = Stream(mirror, index, backoff)
    try:
        stream.run()
    except BaseException:
        stream.failed = True
        raise
    finally:
        stream.close()

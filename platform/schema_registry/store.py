"""The registry's storage: records in a compacted, single-partition Kafka topic (``kafkastore.topic``).

A reader thread consumes the topic from the beginning for as long as the service runs and hands every record
to the event loop, which applies it to the registry. On start the service serves nothing until it has replayed
up to the end of the topic. A write produces one record (acks=all) and returns only after the reader has
applied it, so a registry always answers from what it has read back. Produce failures are STORE_ERROR (50001);
no acknowledgement or no read-back within ``kafkastore.timeout.ms`` is STORE_TIMEOUT (50002). librdkafka keeps
reconnecting, so the service recovers by itself when the brokers return.

Fencing (``kafkastore.transactional.id``, logbus's): a leader writes each record in a transaction of that id.
A newly elected leader first calls ``init_transactions``, which bumps the id's epoch: any earlier leader still
holding the id (paused, cut off, not yet told it lost the election) is fenced, its open transaction is aborted,
and its next write fails with STORE_ERROR instead of handing out an id the new leader also hands out. A fenced
instance writes nothing more until it is elected again. Readers are read_committed (librdkafka's default), so
an aborted record is never applied.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from logbus.retry import Backoff
from schema_registry.core import STORE_ERROR, STORE_TIMEOUT, RegistryError

log = logging.getLogger(__name__)


class KafkaStore:
    def __init__(self, bootstrap: str, topic: str, timeout_ms: int, replication_factor: int, create: bool,
                 security: dict | None = None, transactional_id: str | None = None):
        self.bootstrap = bootstrap
        self.security = dict(security or {})  # librdkafka's security.protocol / sasl.* / ssl.* (kafkastore.*)
        self.topic = topic
        self.timeout = timeout_ms / 1000
        self.replication_factor = replication_factor
        self.create = create
        self.apply = None  # set by the service: apply(key, value) on the event loop
        self.applied = -1
        self.skipped = 0  # records of the topic that could not be applied (malformed or refused by apply)
        self.last_skipped: dict | None = None  # {"offset", "error"} of the newest of them
        self._read_to = -1  # the last offset handed to the event loop by the reader thread
        self._waiters: list[tuple[int, asyncio.Future]] = []
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self.producer: Producer | None = None
        self.transactional_id = transactional_id
        self._txn: Producer | None = None  # the leader's transactional producer (fencing), once initialised
        self._txn_lock: asyncio.Lock | None = None
        self.fenced = False  # a newer leader took the transactional id: no writes until elected again

    # ---- lifecycle ------------------------------------------------------------------------------------------
    async def start(self, startup_timeout: float = 60.0) -> None:
        """Find (or create) the topic and replay it. A cluster that is away, or a topic that a read-only
        registry waits for, is retried with a bounded backoff until it works: the registry never gives up."""
        self.loop = asyncio.get_running_loop()
        backoff = Backoff(1.0, 30.0)
        while True:
            try:
                await asyncio.to_thread(self._ensure_topic, startup_timeout)
                end = await asyncio.to_thread(self._end_offset, startup_timeout)
                break
            except (KafkaException, RuntimeError) as exc:
                delay = backoff.next()
                reason = exc.args[0].str() if isinstance(exc, KafkaException) else str(exc)
                log.warning("store %s on %s not ready (%s); trying again in %.1f s", self.topic, self.bootstrap,
                            reason, delay)
                await asyncio.sleep(delay)
        self.producer = Producer({**self._base(), "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 0, "message.timeout.ms": max(int(self.timeout * 1000), 1000)})
        for target in (self._read, self._poll_producer):
            thread = threading.Thread(target=target, daemon=True, name=f"schemas-{target.__name__}")
            thread.start()
            self._threads.append(thread)
        if end > 0:
            await self._applied(end - 1)  # the reader retries on its own until it gets there
        log.info("replayed %d record(s) of %s", end, self.topic)

    def _base(self) -> dict:
        return {"bootstrap.servers": self.bootstrap, **self.security}

    def _ensure_topic(self, timeout: float) -> None:
        admin = AdminClient(self._base())
        metadata = admin.list_topics(timeout=timeout)
        if self.topic in metadata.topics and not metadata.topics[self.topic].error:
            return
        if not self.create:
            raise RuntimeError(f"topic {self.topic} does not exist (a read-only registry does not create it)")
        rf = max(1, min(self.replication_factor, len(metadata.brokers)))
        future = admin.create_topics([NewTopic(self.topic, 1, rf, config={"cleanup.policy": "compact"})])
        try:
            future[self.topic].result(timeout)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise

    def _end_offset(self, timeout: float) -> int:
        consumer = Consumer({**self._base(), "group.id": "schema-registry-probe",
                             "enable.auto.commit": False})
        try:
            return consumer.get_watermark_offsets(TopicPartition(self.topic, 0), timeout=timeout)[1]
        finally:
            consumer.close()

    async def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            await asyncio.to_thread(thread.join, 5)
        if self.producer is not None:
            self.producer.flush(2)

    # ---- reading -------------------------------------------------------------------------------------------
    def _read(self) -> None:
        """Follow the topic; a failed reader resumes after the last record applied."""
        backoff = Backoff(1.0, 30.0)
        while not self._stop.is_set():
            try:
                self._follow()
            except Exception as exc:
                delay = backoff.next()
                log.warning("reading %s failed (%s); resuming in %.1f s", self.topic, exc, delay)
                self._stop.wait(delay)

    def _follow(self) -> None:
        # a write shows up at once: the broker answers a waiting fetch as soon as the high watermark passes new
        # records, so fetch.wait.max.ms only sets how often an idle store asks (librdkafka's default, 500 ms)
        consumer = Consumer({**self._base(), "group.id": "schema-registry", "client.id": "schema-registry-store",
                             "enable.auto.commit": False, "fetch.queue.backoff.ms": 0})
        resume = self._read_to + 1 if self._read_to >= 0 else OFFSET_BEGINNING
        consumer.assign([TopicPartition(self.topic, 0, resume)])
        try:
            while not self._stop.is_set():
                msg = consumer.poll(0.2)  # returns at the first record (consume(n) would wait for n of them)
                if msg is not None and not msg.error():
                    try:
                        key = json.loads(msg.key())
                        value = json.loads(msg.value()) if msg.value() is not None else None
                    except (TypeError, ValueError) as exc:
                        key, value = {"_malformed": f"not JSON: {exc}"}, None
                    self._read_to = msg.offset()
                    self.loop.call_soon_threadsafe(self._on_record, msg.offset(), key, value)
                elif msg is None:  # transaction markers and aborted records are skipped, not delivered: the
                    # position past them still counts as read (a store's end offset can be a commit marker)
                    position = consumer.position([TopicPartition(self.topic, 0)])[0].offset
                    if position - 1 > self._read_to:
                        self._read_to = position - 1
                        self.loop.call_soon_threadsafe(self._on_record, position - 1, None, None)
        finally:
            consumer.close()

    def _on_record(self, offset: int, key: dict, value: dict | None) -> None:
        if key:
            try:
                if "_malformed" in key:
                    raise ValueError(key["_malformed"])
                self.apply(key, value)
            except Exception as exc:
                # the registry now differs from what the topic says: loud, and counted in GET /status
                self.skipped += 1
                self.last_skipped = {"offset": offset, "error": f"{type(exc).__name__}: {exc}"}
                log.error("SKIPPED the %s record at offset %d: it cannot be applied (%s: %s); %d skipped so far",
                          self.topic, offset, type(exc).__name__, exc, self.skipped, exc_info=True)
        self.applied = max(self.applied, offset)
        for target, future in self._waiters:
            if target <= self.applied and not future.done():
                future.set_result(None)
        self._waiters = [(t, f) for t, f in self._waiters if not f.done()]

    async def catch_up(self) -> None:
        """Apply ``_schemas`` up to its current end (a new leader does this before it allocates an id, so no id
        that a previous leader handed out is given again). STORE_TIMEOUT when the end is not reached in time.
        With fencing, the transactional id is taken first (earlier leaders fenced, their open transaction
        aborted, so the end is stable)."""
        wait = max(self.timeout, 30.0)
        if self.transactional_id:
            await self._take_transactional_id(wait)
        try:
            end = await asyncio.to_thread(self._end_offset, wait)
            if end > 0:
                await asyncio.wait_for(self._applied(end - 1), wait)
        except (KafkaException, asyncio.TimeoutError):
            raise RegistryError(STORE_TIMEOUT, "The new leader could not read the Kafka store to its end in time") \
                from None
        log.info("caught up with %s to offset %d", self.topic, end)

    async def wait_applied(self, offset: int) -> None:
        """Wait (at most ``kafkastore.timeout.ms``) until ``offset`` is applied here; quietly give up after."""
        try:
            await asyncio.wait_for(self._applied(offset), max(self.timeout, 1.0))
        except asyncio.TimeoutError:
            log.warning("offset %d of %s not applied here within %.1f s", offset, self.topic, self.timeout)

    async def _applied(self, offset: int) -> None:
        if self.applied >= offset:
            return
        future = self.loop.create_future()
        self._waiters.append((offset, future))
        await future

    # ---- writing -------------------------------------------------------------------------------------------
    def _poll_producer(self) -> None:
        while not self._stop.is_set():
            self.producer.poll(0.1)

    async def _take_transactional_id(self, wait: float) -> None:
        def init() -> Producer:
            producer = Producer({**self._base(), "transactional.id": self.transactional_id, "acks": "all",
                                 "linger.ms": 0, "transaction.timeout.ms": 60000,
                                 "message.timeout.ms": max(int(self.timeout * 1000), 1000)})
            producer.init_transactions(wait)
            return producer

        try:
            producer = await asyncio.to_thread(init)
        except KafkaException as exc:
            raise RegistryError(STORE_TIMEOUT, f"The new leader could not take the store's transactional id: "
                                               f"{exc.args[0].str()}") from None
        old, self._txn, self.fenced = self._txn, producer, False
        self._txn_lock = self._txn_lock or asyncio.Lock()
        if old is not None:
            await asyncio.to_thread(old.flush, 0)
        log.info("took transactional id %s: earlier leaders are fenced", self.transactional_id)

    async def write(self, key: dict, value: dict | None) -> None:
        if self.transactional_id:
            return await self._write_fenced(key, value)
        delivered = self.loop.create_future()

        def on_delivery(err, msg):
            self.loop.call_soon_threadsafe(lambda: delivered.done() or delivered.set_result((err, msg.offset())))

        try:
            self.producer.produce(self.topic, json.dumps(value).encode() if value is not None else None,
                                  json.dumps(key).encode(), partition=0, on_delivery=on_delivery)
        except (BufferError, KafkaException) as exc:
            raise RegistryError(STORE_ERROR, f"Error while storing the schema: {exc}") from None
        try:
            err, offset = await asyncio.wait_for(delivered, self.timeout)
        except asyncio.TimeoutError:
            raise RegistryError(STORE_TIMEOUT, "Write to the Kafka store timed out") from None
        if err is not None:
            code = STORE_TIMEOUT if err.code() == KafkaError._MSG_TIMED_OUT else STORE_ERROR
            raise RegistryError(code, f"Error while storing the schema: {err.str()}")
        await self._read_back(offset)

    async def _read_back(self, offset: int) -> None:
        """A write returns once the reader applied it here (read-your-write); STORE_TIMEOUT after
        ``kafkastore.timeout.ms``."""
        try:
            await asyncio.wait_for(self._applied(offset), self.timeout)
        except asyncio.TimeoutError:
            raise RegistryError(STORE_TIMEOUT, "The write was not read back from the Kafka store in time") \
                from None

    async def _write_fenced(self, key: dict, value: dict | None) -> None:
        """One record in one transaction of the leader's transactional id (see the module docstring)."""
        if self.fenced or self._txn is None:
            raise RegistryError(STORE_ERROR, "Error while storing the schema: this instance is not the leader "
                                             "(its transactional id was taken by a newer leader)")
        producer, offsets = self._txn, []

        def transaction() -> None:
            producer.begin_transaction()
            producer.produce(self.topic, json.dumps(value).encode() if value is not None else None,
                             json.dumps(key).encode(), partition=0,
                             on_delivery=lambda err, msg: offsets.append(msg.offset()) if err is None else None)
            producer.commit_transaction(max(self.timeout, 10.0))

        async with self._txn_lock:
            try:
                await asyncio.to_thread(transaction)
            except KafkaException as exc:
                error = exc.args[0]
                if error.fatal() or error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                                     KafkaError.INVALID_PRODUCER_EPOCH):
                    self.fenced = True
                    log.warning("store write refused: %s; this instance writes nothing more until elected again",
                                error.str())
                    raise RegistryError(STORE_ERROR, "Error while storing the schema: this instance is not the "
                                                     f"leader any more ({error.str()})") from None
                if error.txn_requires_abort():
                    await asyncio.to_thread(self._abort, producer)
                code = STORE_TIMEOUT if error.retriable() or error.code() == KafkaError._TIMED_OUT else STORE_ERROR
                raise RegistryError(code, f"Error while storing the schema: {error.str()}") from None
        if not offsets:
            raise RegistryError(STORE_ERROR, "Error while storing the schema: the record was not delivered")
        await self._read_back(offsets[0])

    def _abort(self, producer: Producer) -> None:
        try:
            producer.abort_transaction(max(self.timeout, 10.0))
        except KafkaException as exc:
            log.warning("aborting the store's transaction: %s", exc.args[0].str())

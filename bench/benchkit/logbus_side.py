"""The paper's workload against one logbus broker with confluent-kafka (librdkafka, the fastest maintained Kafka
client on PyPI), and with kcat (C, no Python per message) for the consumer.

Producer: acks=1, measured until the broker's high watermark covers every message. Batch 1 is
batch.num.messages=1 + linger.ms=0 (one message per record batch, as the paper's batch size 1); batch 50 is
batch.num.messages=50; "default" is librdkafka's own batching. Consumer: ~200 KB per fetch
(fetch.max.bytes = max.partition.fetch.bytes = 204800), as the paper's 1,000 messages / 200 KB per pull.
"""

from __future__ import annotations

import os
import struct
import subprocess
import threading
import time

from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition
from support import BrokerProcess  # tests/support.py

from benchkit.machine import allocated_bytes, self_cpu, tree_cpu
from benchkit.peers import JEMALLOC

RUNS = {"batch1": {"batch.num.messages": 1, "linger.ms": 0},
        "batch50": {"batch.num.messages": 50, "linger.ms": 5},
        "default": {}}
FETCH_200KB = {"fetch.max.bytes": 204800, "max.partition.fetch.bytes": 204800, "message.max.bytes": 204800}
# kcat with jemalloc instead of glibc's malloc: librdkafka's fetch thread allocates every message and kcat's main
# thread frees it, and glibc's arenas take a lock for a free from another thread (a futex wait and wake-up when
# they collide); jemalloc's per-thread caches do not (Debian's libjemalloc2, preloaded; the kcat binary unchanged)
JEMALLOC_ENV = {"LD_PRELOAD": JEMALLOC}


def high_watermark(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        consumer.close()


class WatermarkSampler(threading.Thread):
    """Polls the partition's high watermark every ``interval`` s while a producer runs: what the broker has
    received over time (the client's own send rate only shows how fast it fills its buffer)."""

    def __init__(self, bootstrap: str, topic: str, size: int, interval: float = 0.05):
        super().__init__(daemon=True)
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-sampler"})
        self.tp = TopicPartition(topic, 0)
        self.base = self.consumer.get_watermark_offsets(self.tp, timeout=10)[1]
        self.size, self.interval = size, interval
        self.done = threading.Event()
        self.samples: list[list[float]] = []

    def run(self) -> None:
        last_hw, last_t = self.base, time.perf_counter()
        while not self.done.wait(self.interval):
            hw = self.consumer.get_watermark_offsets(self.tp, timeout=10)[1]
            now = time.perf_counter()
            if hw > last_hw:
                self.samples.append([round((hw - self.base) * self.size / 1e6, 2),
                                     round((hw - last_hw) / (now - last_t))])
            last_hw, last_t = hw, now

    def stop(self) -> list[list[float]]:
        self.done.set()
        self.join()
        self.consumer.close()
        return self.samples


def _result(count: int, size: int, elapsed: float, broker_cpu: float, client_cpu: float, samples: list) -> dict:
    return {"messages": count, "seconds": round(elapsed, 3), "msg_per_s": round(count / elapsed),
            "MB_per_s": round(count * size / elapsed / 1e6, 1),
            "broker_cpu_s_per_GB": round(broker_cpu / (count * size / 1e9), 2),
            "broker_cpu_s": round(broker_cpu, 2), "client_cpu_s": round(client_cpu, 2), "samples": samples}


def send_all(producer: Producer, topic: str, count: int, payloads: list[bytes]) -> None:
    """``count`` messages, cycling through 1,024 ``payloads``, waiting for room when the queue is full."""
    produce_fn, poll = producer.produce, producer.poll
    for i in range(count):
        while True:
            try:
                produce_fn(topic, payloads[i & 1023])
                break
            except BufferError:
                poll(0.001)


def produce(broker: BrokerProcess, topic: str, count: int, size: int, conf: dict) -> dict:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": 1, "queue.buffering.max.messages": 1_000_000,
                         "queue.buffering.max.kbytes": 1_048_576, **conf})
    producer.produce(topic, b"x" * size)  # creates the topic; counted in the disk figure, not in the timing
    producer.flush(30)
    before = allocated_bytes(broker.log_dir / f"{topic}-0")
    payloads = [os.urandom(size) for _ in range(1024)]
    sampler = WatermarkSampler(broker.bootstrap, topic, size)
    broker_cpu0, client_cpu0 = tree_cpu(broker.proc.pid), self_cpu()
    start = time.perf_counter()
    sampler.start()
    send_all(producer, topic, count, payloads)
    producer.flush(600)
    elapsed = time.perf_counter() - start
    samples = sampler.stop()
    if high_watermark(broker.bootstrap, topic) != count + 1:
        raise RuntimeError("not every message reached the broker")
    result = _result(count, size, elapsed, tree_cpu(broker.proc.pid) - broker_cpu0, self_cpu() - client_cpu0,
                     samples)
    result["disk_bytes_per_msg"] = round((allocated_bytes(broker.log_dir / f"{topic}-0") - before) / count, 1)
    return result


def consume(broker: BrokerProcess, topic: str, count: int, size: int) -> dict:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "bench", "enable.auto.commit": False,
                         **FETCH_200KB, "queued.max.messages.kbytes": 262144, "queued.min.messages": 1_000_000,
                         # librdkafka >= 2.x pauses fetching for fetch.queue.backoff.ms (1 s) whenever its
                         # local queue is over the thresholds: that measures the client's queue, not the broker.
                         "fetch.queue.backoff.ms": 0})
    consumer.assign([TopicPartition(topic, 0, 1)])  # skip the message that created the topic
    step = max(count // 100, 1)
    samples = []
    broker_cpu0, client_cpu0 = tree_cpu(broker.proc.pid), self_cpu()
    start = mark = time.perf_counter()
    got = nbytes = 0
    while got < count:
        for msg in consumer.consume(10_000, timeout=5):
            if msg.error():
                raise RuntimeError(msg.error())
            got += 1
            nbytes += len(msg.value())
            if got % step == 0:
                now = time.perf_counter()
                samples.append([round(got * size / 1e6, 2), round(step / (now - mark))])
                mark = now
    elapsed = time.perf_counter() - start
    consumer.close()
    if got != count or nbytes != count * size:
        raise RuntimeError(f"consumed {got} messages, {nbytes} bytes")
    return _result(count, size, elapsed, tree_cpu(broker.proc.pid) - broker_cpu0, self_cpu() - client_cpu0,
                   samples)


def consume_kcat(broker: BrokerProcess, topic: str, count: int, size: int, env: dict | None = None) -> dict:
    """The same pull with kcat (Debian's build links an older librdkafka, without fetch.queue.backoff.ms);
    ``env``: more environment for kcat (:data:`JEMALLOC_ENV`)."""
    cmd = ["kcat", "-b", broker.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "1", "-c", str(count), "-q", "-f", "",
           *(x for k, v in FETCH_200KB.items() for x in ("-X", f"{k}={v}")), "-X", "queued.min.messages=1000000"]
    broker_cpu0 = tree_cpu(broker.proc.pid)
    before = os.times()
    start = time.perf_counter()
    subprocess.run(cmd, check=True, timeout=600, stdout=subprocess.DEVNULL, env={**os.environ, **(env or {})})
    elapsed = time.perf_counter() - start
    after = os.times()
    client = after.children_user + after.children_system - before.children_user - before.children_system
    return _result(count, size, elapsed, tree_cpu(broker.proc.pid) - broker_cpu0, client, [])


def latency(broker: BrokerProcess, topic: str, rate: int, seconds: int, size: int) -> dict:
    """A producer paced at ``rate`` msg/s and a consumer tailing the partition, in this process; the payload
    carries perf_counter_ns() of the send. Producer linger.ms=0, acks=1; the consumer long-polls."""
    total = rate * seconds
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": 1, "linger.ms": 0})
    producer.produce(topic, b"x" * size)
    producer.flush(30)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "bench-latency",
                         "enable.auto.commit": False, "fetch.queue.backoff.ms": 0, "fetch.wait.max.ms": 500})
    consumer.assign([TopicPartition(topic, 0, OFFSET_END)])
    consumer.consume(1, timeout=1)  # the fetch session is up before the clock starts
    micros: list[int] = []
    failure: list[BaseException] = []

    def tail() -> None:
        try:
            deadline = time.monotonic() + seconds + 60
            while len(micros) < total and time.monotonic() < deadline:
                msg = consumer.poll(0.2)  # returns as soon as one message is there (consume(n) waits for n)
                if msg is not None and not msg.error():
                    micros.append((time.perf_counter_ns() - struct.unpack_from(">q", msg.value())[0]) // 1000)
        except BaseException as exc:  # reported by the caller
            failure.append(exc)

    thread = threading.Thread(target=tail)
    thread.start()
    pad = b"\0" * (size - 8)
    interval = 1e9 / rate
    start = time.perf_counter_ns()
    for i in range(total):
        due = start + i * interval
        wait = (due - time.perf_counter_ns()) / 1e9
        if wait > 0:
            time.sleep(wait)
        producer.produce(topic, struct.pack(">q", time.perf_counter_ns()) + pad)
        producer.poll(0)
    producer.flush(30)
    thread.join()
    consumer.close()
    if failure or len(micros) != total:
        raise RuntimeError(f"latency run received {len(micros)} of {total}: {failure}")
    micros.sort()
    return {"messages": total, "rate": rate, "p50_us": micros[total // 2], "p99_us": micros[int(total * 0.99)],
            "max_us": micros[-1]}

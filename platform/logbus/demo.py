"""``logbus demo``: the main job until the two-datacenter topology exists (see the Topology issue).

Starts one standalone broker as a child process (data under ``--state-dir``, a free loopback port), creates the
``page-views`` topic, publishes demo page-view events with keys and headers through confluent-kafka, reads them
back with a second client, checks that every event arrived intact, prints what happened, and stops the broker
cleanly. Running it again keeps the data and appends to it.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

TOPIC = "page-views"
PARTITIONS = 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_listening(port: int, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"broker exited with code {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("broker did not start listening in time")


def run_demo(state_dir: str, messages: int) -> int:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    state = Path(state_dir).resolve()
    state.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    config = state / "server.properties"
    config.write_text(f"broker.id=0\nlisteners=PLAINTEXT://127.0.0.1:{port}\nlog.dirs={state / 'logs'}\n"
                      f"num.partitions={PARTITIONS}\n")
    broker_log = open(state / "broker.log", "ab")
    proc = subprocess.Popen([sys.executable, "-m", "logbus.cli", "broker", str(config)], stdout=broker_log,
                            stderr=subprocess.STDOUT)
    bootstrap = f"127.0.0.1:{port}"
    try:
        _wait_listening(port, proc)
        print(f"broker 0 up at {bootstrap}, data in {state / 'logs'} (log: {state / 'broker.log'})")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        if TOPIC not in admin.list_topics(timeout=10).topics:
            admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(10)
        probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "demo"})
        start_offsets = [probe.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1]
                         for p in range(PARTITIONS)]
        probe.close()

        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": "lz4"})
        host = socket.gethostname()
        started = time.perf_counter()
        for i in range(messages):
            event = {"member": i % 5000, "page": f"/profile/{i % 997}", "time": int(time.time() * 1000)}
            while True:
                try:
                    producer.produce(TOPIC, json.dumps(event).encode(), key=str(event["member"]).encode(),
                                     headers=[("server", host.encode())])
                    break
                except BufferError:
                    producer.poll(0.01)
        if producer.flush(60) != 0:
            print("logbus demo: not every event was acknowledged", file=sys.stderr)
            return 1
        produce_s = time.perf_counter() - started
        print(f"produced {messages:,} page-view events in {produce_s:.2f}s ({messages / produce_s:,.0f}/s)")

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "demo", "enable.auto.commit": False})
        consumer.assign([TopicPartition(TOPIC, p, start_offsets[p]) for p in range(PARTITIONS)])
        got = 0
        started = time.perf_counter()
        deadline = time.monotonic() + 60
        while got < messages and time.monotonic() < deadline:
            for msg in consumer.consume(min(10_000, messages - got), timeout=1):  # no more than are left
                if msg.error():
                    raise RuntimeError(str(msg.error()))
                event = json.loads(msg.value())
                if msg.key() != str(event["member"]).encode() or dict(msg.headers())["server"] != host.encode():
                    raise RuntimeError(f"event at {msg.partition()}/{msg.offset()} came back altered")
                got += 1
        consume_s = time.perf_counter() - started
        consumer.close()
        print(f"consumed {got:,} events back in {consume_s:.2f}s ({got / consume_s:,.0f}/s), keys and headers intact")
        if got != messages:
            print(f"logbus demo: expected {messages} events, read {got}", file=sys.stderr)
            return 1
        print(f"topic {TOPIC}: {PARTITIONS} partitions; this run appended {messages:,} events after offsets "
              f"{start_offsets} (earlier runs' data is kept)")
        return 0
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        broker_log.close()
        print("broker stopped" + (" cleanly" if proc.returncode == 0 else f" (exit {proc.returncode})"))

"""A static consumer-group member (confluent-kafka, ``group.instance.id``) in its own process, so that a test can
``kill -9`` it, restart it, or start a second one with the same instance id. Writes one JSON line per event to OUT:

    {"event": "assign" | "revoke" | "lost", "partitions": [...], "member_id": ..., "t": ...}
    {"event": "msg", "partition": p, "offset": o}
    {"event": "error", "code": ..., "name": ..., "fatal": bool, "str": ...}
    {"event": "exit", "reason": "fatal" | "closed"}   (exit status 3 after a fatal error, such as being fenced)

SIGTERM closes the consumer (a static member does not send LeaveGroup on close) and exits 0.

    python static_member_worker.py BOOTSTRAP GROUP TOPIC INSTANCE_ID OUT [SESSION_TIMEOUT_MS]
"""

import json
import signal
import sys
import time

from confluent_kafka import Consumer, KafkaError


def main() -> None:
    bootstrap, group, topic, instance, out = sys.argv[1:6]
    session_ms = int(sys.argv[6]) if len(sys.argv) > 6 else 6000
    stop, fatal = [], []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    with open(out, "a", buffering=1) as f:
        def write(**event):
            f.write(json.dumps({**event, "t": time.time()}) + "\n")

        def on_error(err):
            write(event="error", code=err.code(), name=err.name(), fatal=err.fatal(), str=err.str())
            if err.fatal() or err.code() == KafkaError._FATAL:  # error_cb reports a fatal error as _FATAL
                fatal.append(err)

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.instance.id": instance,
                             "session.timeout.ms": session_ms, "heartbeat.interval.ms": 300,
                             "partition.assignment.strategy": "range", "auto.offset.reset": "earliest",
                             "enable.auto.commit": True, "auto.commit.interval.ms": 500, "error_cb": on_error})

        def callback(name):
            return lambda c, parts: write(event=name, partitions=sorted(p.partition for p in parts),
                                          member_id=c.memberid())

        consumer.subscribe([topic], on_assign=callback("assign"), on_revoke=callback("revoke"),
                           on_lost=callback("lost"))
        while not stop:
            msg = consumer.poll(0.2)
            if fatal:
                write(event="exit", reason="fatal")
                sys.exit(3)
            if msg is None:
                continue
            if msg.error():
                on_error(msg.error())
                continue
            write(event="msg", partition=msg.partition(), offset=msg.offset())
        consumer.close()
        write(event="exit", reason="closed")


if __name__ == "__main__":
    main()

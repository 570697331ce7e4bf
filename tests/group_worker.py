"""A consumer-group member in its own process (so a test can kill -9 it): subscribes, writes one line per
message (partition offset value) to OUT, commits synchronously every COMMIT_EVERY messages."""

import sys

from confluent_kafka import Consumer, KafkaException


def main() -> None:
    bootstrap, group, topic, out, commit_every = sys.argv[1:6]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                         "partition.assignment.strategy": "range"})
    consumer.subscribe([topic])
    done = 0
    with open(out, "a", buffering=1) as f:
        while True:
            for msg in consumer.consume(500, timeout=0.2):
                if msg.error():
                    continue
                f.write(f"{msg.partition()} {msg.offset()} {msg.value().decode()}\n")
                done += 1
                if done % int(commit_every) == 0:
                    f.flush()
                    try:
                        consumer.commit(asynchronous=False)  # positions of every assigned partition
                    except KafkaException:
                        pass  # e.g. a rebalance is in progress: the next commit covers it


if __name__ == "__main__":
    main()

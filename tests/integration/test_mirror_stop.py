"""A mirror told to stop (SIGTERM) while both clusters are away exits within seconds, not after its API timeouts:
``docker stop`` gives a container 10 s before SIGKILL, and ``logbus down`` 60 s. Both copy paths of the
topologies (batches, at-least-once and exactly-once) and the record path; the test_mirror rig (the live broker
behind a TCP proxy, two offline brokers, one ZooKeeper)."""

from __future__ import annotations

import subprocess
import time

import pytest
from confluent_kafka import KafkaException
from support import mirror_process, read_topic, wait_until

from test_mirror import produce, two_clusters
from test_mirror_exactly_once import TXN  # the offline cluster's transaction log, for --exactly-once

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
STOP_WITHIN_S = 10  # docker stop's default grace period


def copied(bootstrap: str) -> int:
    try:
        return len(read_topic(bootstrap, "pv", timeout=20))
    except (KafkaException, KeyError, AssertionError):  # the target topic is not there yet, or not readable yet
        return 0


@pytest.mark.parametrize("mode", [("--exactly-once",), (), ("--copy", "records")],
                         ids=["batches-exactly-once", "batches", "records"])
def test_mirror_stops_promptly_with_both_clusters_away(tmp_path, mode):
    with two_clusters(tmp_path, **TXN) as clusters:
        produce(clusters["live"], "pv", 3000)
        mirror = mirror_process(tmp_path / "mirror", clusters["live"], clusters["offline"], "pv", *mode).start()
        clusters["mirrors"].append(mirror)
        wait_until(lambda: copied(clusters["offline"]) >= 3000, 90, interval=1, what="the mirror copied the topic")
        clusters["proxy"].cut()  # the live cluster out of reach, and the offline brokers gone
        for broker in clusters["offline_brokers"]:
            broker.stop()
        time.sleep(3)  # the streams are now in their metadata refreshes and retries
        assert mirror.proc.poll() is None, mirror.log_text()[-2000:]
        started = time.monotonic()
        mirror.proc.terminate()
        try:
            mirror.proc.wait(60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the mirror had not exited 60 s after SIGTERM:\n{mirror.log_text()[-2000:]}")
        took = time.monotonic() - started
        assert took < STOP_WITHIN_S, f"exited {took:.1f} s after SIGTERM:\n{mirror.log_text()[-2000:]}"

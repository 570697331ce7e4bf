"""kcat (librdkafka's command-line client) against a broker process."""

import subprocess
import uuid

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def kcat(*args, stdin=None):
    return subprocess.run(["kcat", *args], input=stdin, capture_output=True, text=True, timeout=30, check=True)


def test_kcat_metadata_produce_consume(broker):
    topic = f"kcat-{uuid.uuid4().hex[:8]}"
    lines = "".join(f"key{i}:value {i}\n" for i in range(100))
    kcat("-b", broker.bootstrap, "-P", "-t", topic, "-K:", "-H", "source=kcat", stdin=lines)
    listing = kcat("-b", broker.bootstrap, "-L").stdout
    assert f'topic "{topic}" with 1 partitions' in listing
    assert f"broker 0 at {broker.bootstrap}" in listing
    out = kcat("-b", broker.bootstrap, "-C", "-t", topic, "-e", "-f", "%o|%k|%s|%h\n").stdout
    assert out.splitlines() == [f"{i}|key{i}|value {i}|source=kcat" for i in range(100)]
    tail = kcat("-b", broker.bootstrap, "-C", "-t", topic, "-o", "95", "-e", "-f", "%o\n").stdout
    assert tail.split() == [str(i) for i in range(95, 100)]
    last = kcat("-b", broker.bootstrap, "-C", "-t", topic, "-o", "-2", "-e", "-f", "%s\n").stdout
    assert last.splitlines() == ["value 98", "value 99"]

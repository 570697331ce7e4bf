"""One broker in this process, sent ``N`` unbatched Produce requests straight to its listener's ``dispatch`` (no
sockets, no event-loop round trips): the request path's own work, for counting its instructions under
``valgrind --tool=cachegrind`` (``bench/request_instructions.py``). The broker's code comes from the
``platform/`` directory given; the request frames are built here once (kio, via the tests' raw client).

Usage: python bench/benchkit/inproc_produce.py <platform dir> <requests> [<stage to skip>]

A stage to skip replaces one step of the path with a constant (``decode``: the request header and body as
decoded once; ``validate``: the batch's summary as checked once; ``append``: the partition log's append;
``response``: a 60-byte answer; ``metrics``: the request and produce counters), so that the difference in
instructions to a full run is that step's cost.
"""

from __future__ import annotations

import asyncio
import datetime
import io
import struct
import sys
import tempfile
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2] / "tests"
STAGES = ("decode", "validate", "append", "response", "metrics")  # "harness": no request handled (the loop's own)


def produce_frame(records: bytes) -> bytes:
    """A Produce v9 request (acks=1, one partition of topic ``bench``) as librdkafka sends it, without its size
    prefix."""
    from kio.serial import entity_writer
    from rawclient import request_module

    m = request_module(0, 9)
    request = m.ProduceRequest(transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=5), topic_data=(
        m.TopicProduceData(name="bench", partition_data=(m.PartitionProduceData(index=0, records=records),)),))
    body = io.BytesIO()
    entity_writer(type(request))(body, request)
    return struct.pack(">hhih", 0, 9, 0, 7) + b"rdkafka" + b"\x00" + body.getvalue()


def call(listener, payload, session) -> None:
    """``dispatch`` of this tree or of an earlier one (a coroutine there): run to its end."""
    result = listener.dispatch(payload, session)
    if hasattr(result, "send"):
        try:
            result.send(None)
        except StopIteration:
            pass


def skip(stage: str, broker, frame: bytes, records: bytes) -> None:
    from broker.protocol import codec, produce_response, records as batch_records, validation

    if stage == "decode":
        header = codec.read_header(frame)
        request = codec.decode_body(header, frame)
        codec.read_header = lambda *_: header
        codec.decode_body = lambda *_: request
    elif stage == "validate":
        summary = batch_records.validate(records, 1 << 20)
        validation.check_small = lambda *_: summary
        batch_records.validate = lambda *_: summary
        validation.check_records = lambda *_, **__: None
    elif stage == "append":
        broker.log_for("bench", 0).append = lambda *_: 0
    elif stage == "response":
        produce_response.encode = lambda *_: b"r" * 60
    elif stage == "metrics":
        broker.metrics.request = lambda *_: None
        broker.metrics.produced = lambda *_: None
    elif stage and stage != "harness":
        raise SystemExit(f"inproc_produce: unknown stage {stage!r} (one of {', '.join(STAGES)})")


async def main(platform_dir: str, count: int, stage: str) -> None:
    sys.path[:0] = [platform_dir, str(TESTS)]
    from broker.config import BrokerConfig
    from broker.network.session import Session
    from broker.server import Broker
    from rawclient import batch

    with tempfile.TemporaryDirectory(prefix="logbus-inproc-") as logs:
        config = BrokerConfig.from_strings({"broker.id": "0", "listeners": "PLAINTEXT://127.0.0.1:0",
                                            "log.dirs": logs})
        broker = Broker(config)
        await broker.start()
        try:
            await broker.create_topic("bench", 1, 1, {})
            listener = next(iter(broker.listeners.values()))
            session = Session(listener.name, "PLAINTEXT")
            records = batch([b"x" * 200])
            frame = produce_frame(records)
            frames = []
            for i in range(count + 200):  # distinct correlation ids, as a client's
                payload = bytearray(frame)
                struct.pack_into(">i", payload, 4, i)
                frames.append(bytes(payload))
            for payload in frames[:200]:  # warm: caches, first index entries, the log's files
                call(listener, payload, session)
            skip(stage, broker, frame, records)
            handle = (lambda *_: None) if stage == "harness" else call
            for payload in frames[200:]:
                handle(listener, payload, session)
        finally:
            await broker.stop()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else ""))

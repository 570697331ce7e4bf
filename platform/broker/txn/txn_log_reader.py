"""Key/value records of whole batches read from ``__transaction_state`` (control batches skipped). No I/O."""

from __future__ import annotations

from broker.protocol.batch_builder import varint
from broker.protocol.record_reader import STORED_BATCH_CAP, iter_records, records_body
from broker.protocol.records import HEADER_SIZE, read_header


def read_batches(data: bytes):
    """Yield (next offset after the batch, [(key, value or None)]) for every whole batch in ``data`` (a trailing
    partial batch is ignored; control batches and keyless records give no entries)."""
    pos = 0
    while pos + HEADER_SIZE <= len(data):
        header = read_header(data, pos)
        if pos + header.size > len(data):
            return
        entries = []
        if not header.attributes & 0x20:
            body = records_body(memoryview(data)[pos:pos + header.size], header, STORED_BATCH_CAP)
            for _s, _e, _ts, _delta, key_start, key_length, value_length in iter_records(body, header.record_count):
                if key_length < 0:
                    continue
                key = bytes(body[key_start:key_start + key_length])
                value_start = key_start + key_length + len(varint(value_length))
                value = None if value_length < 0 else bytes(body[value_start:value_start + value_length])
                entries.append((key, value))
        yield header.next_offset, entries
        pos += header.size

"""Avro payloads (Confluent wire format) into warehouse rows, on the executors.

The reader schema of a topic is the latest version of its subject ``<topic>-value`` (TopicNameStrategy); each
record is decoded with its own writer schema (fetched by id, cached per process) resolved against it, so older
records land in the current table shape. Records that cannot be decoded — no magic byte, an id the registry does
not know, a body that does not match — become quarantine rows with the raw bytes and the reason; none is dropped.
An unreachable registry fails the task (Spark retries it): it is not the record's fault.
"""

from __future__ import annotations

import io
import json
import struct

import numpy as np

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

PRIMITIVES = {"boolean": BooleanType(), "int": IntegerType(), "long": LongType(), "float": FloatType(),
              "double": DoubleType(), "bytes": BinaryType(), "string": StringType()}
META = [
    StructField("_partition", IntegerType(), False), StructField("_offset", LongType(), False),
    StructField("_timestamp", TimestampType()), StructField("_key", BinaryType()),
    StructField("_schema_id", IntegerType()), StructField("_producer", StringType()), StructField("_seq", LongType()),
    StructField("_host", StringType()), StructField("_generated", LongType()),
]
ERROR = [StructField("_error", StringType()), StructField("_value", BinaryType())]


def avro_to_spark(schema, named: dict | None = None) -> tuple[DataType, bool]:
    """(Spark type, nullable) of an Avro schema; unions other than [null, X] become JSON strings."""
    named = {} if named is None else named
    if isinstance(schema, str):
        if schema in PRIMITIVES:
            return PRIMITIVES[schema], False
        if schema == "null":
            return StringType(), True
        return named[schema], False
    if isinstance(schema, list):
        others = [s for s in schema if s != "null"]
        if len(others) == 1:
            return avro_to_spark(others[0], named)[0], True
        return StringType(), True
    kind, logical = schema["type"], schema.get("logicalType")
    if logical in ("timestamp-millis", "timestamp-micros"):
        return TimestampType(), False
    if logical == "date":
        return DateType(), False
    if kind == "record":
        fields = []
        for f in schema["fields"]:
            t, nullable = avro_to_spark(f["type"], named)
            fields.append(StructField(f["name"], t, nullable))
        struct_type = StructType(fields)
        named[schema["name"]] = struct_type
        if "namespace" in schema:
            named[f"{schema['namespace']}.{schema['name']}"] = struct_type
        return struct_type, False
    if kind == "enum":
        named[schema["name"]] = StringType()
        return StringType(), False
    if kind == "fixed":
        named[schema["name"]] = BinaryType()
        return BinaryType(), False
    if kind == "array":
        t, nullable = avro_to_spark(schema["items"], named)
        return ArrayType(t, nullable), False
    if kind == "map":
        t, nullable = avro_to_spark(schema["values"], named)
        return MapType(StringType(), t, nullable), False
    return avro_to_spark(kind, named)


def table_schema(reader_schema: dict | None) -> StructType:
    """The columns written for a topic: its record's fields, the metadata columns, the error columns."""
    fields = []
    if reader_schema is not None:
        record, _ = avro_to_spark(reader_schema)
        if not isinstance(record, StructType):
            record = StructType([StructField("value", record, True)])
        fields = [StructField(f.name, f.dataType, True) for f in record.fields]
    return StructType(fields + META + ERROR)


class Decoder:
    """Runs inside the source's ``read()`` (one per task); registry lookups cached per schema id."""

    def __init__(self, registry: str | dict, reader_schema: dict | None):
        from settings.registry_client import client

        self.registry = client(registry)  # a URL or SchemaRegistryClient settings
        self.reader_json = reader_schema
        self.reader = None
        self.writers: dict[int, object] = {}
        self.same_as_reader: dict[int, bool] = {}
        self.wrap = reader_schema is not None and not (isinstance(reader_schema, dict)
                                                       and reader_schema.get("type") == "record")
        self.json_columns: set[str] = set()  # multi-type unions: written as JSON text
        if isinstance(reader_schema, dict) and reader_schema.get("type") == "record":
            self.json_columns = {f["name"] for f in reader_schema["fields"]
                                 if isinstance(f["type"], list) and len([t for t in f["type"] if t != "null"]) > 1}

    def writer(self, schema_id: int):
        import fastavro
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        if schema_id not in self.writers:
            try:
                s = self.registry.get_schema(schema_id)
            except SchemaRegistryError as exc:
                if exc.http_status_code == 404:
                    self.writers[schema_id] = None
                    return None
                raise
            parsed = json.loads(s.schema_str)
            # the same schema as the reader's: no resolution needed (much faster per record)
            self.same_as_reader[schema_id] = parsed == self.reader_json
            self.writers[schema_id] = fastavro.parse_schema(parsed)
        return self.writers[schema_id]

    def decode(self, value: bytes | None) -> tuple[dict | None, int | None, str | None]:
        import fastavro

        if self.reader_json is None:
            return None, None, "no schema registered for the topic's subject"
        if self.reader is None:
            self.reader = fastavro.parse_schema(self.reader_json)
        if not value or len(value) < 5 or value[0] != 0:
            return None, None, "not in Confluent's Avro wire format"
        schema_id = struct.unpack(">I", value[1:5])[0]
        writer = self.writer(schema_id)
        if writer is None:
            return None, schema_id, f"unknown schema id {schema_id}"
        try:
            record = fastavro.schemaless_reader(io.BytesIO(value[5:]), writer,
                                                None if self.same_as_reader.get(schema_id) else self.reader)
        except Exception as exc:
            return None, schema_id, f"undecodable with schema id {schema_id}: {type(exc).__name__}"
        return ({"value": record} if self.wrap else record), schema_id, None

    def record_batches(self, chunks, topic: str, partition: int, arrow_schema):
        """Like :meth:`batches`, from :class:`~spark_jobs.columnar.Records` chunks (the raw fetch path): a chunk
        whose values are all of the reader's own schema is decoded column-wise by :mod:`spark_jobs.avro_bulk`,
        any other chunk record by record (a quarantined record sends its whole chunk this way)."""
        import pyarrow as pa

        from spark_jobs import avro_bulk, columnar

        fields = avro_bulk.plan(self.reader_json) if not self.wrap and not self.json_columns else None
        record_fields = [f for f in arrow_schema if not f.name.startswith("_")]
        for r in chunks:
            if not len(r):
                continue
            ids = avro_bulk.schema_ids(r) if fields is not None else None
            columns = None
            if ids is not None and (ids == ids[0]).all() and self.writer(int(ids[0])) is not None \
                    and self.same_as_reader.get(int(ids[0])):
                columns = avro_bulk.decode(r, fields, record_fields)
            if columns is None:
                yield from self.batches([columnar.raw_batch(r, topic, partition, columnar.raw_schema())],
                                        arrow_schema)
                continue
            n = len(r)
            columns.update(avro_bulk.audit_columns(r))
            columns.update(
                _partition=pa.array(np.full(n, partition, dtype=np.int32)), _offset=pa.array(r.offset),
                _timestamp=pa.array(r.timestamp * 1000, type=pa.timestamp("us", tz="UTC")),
                _key=columnar.binary_array(r.buf, r.key_pos, r.key_len),
                _schema_id=pa.array(ids.astype(np.int32)), _error=pa.nulls(n, pa.string()),
                _value=pa.nulls(n, pa.binary()))
            arrays = [columns[f.name] if f.name in columns else pa.nulls(n, f.type) for f in arrow_schema]
            arrays = [a.cast(f.type) if a.type != f.type else a for a, f in zip(arrays, arrow_schema)]
            yield pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)

    def batches(self, batches, arrow_schema):
        """Column-wise: only the values and the headers go through Python; the metadata columns are passed on
        as Arrow arrays."""
        import pyarrow as pa

        record_fields = [f for f in arrow_schema if not f.name.startswith("_")]
        for batch in batches:
            values = batch.column("value").to_pylist()
            headers = batch.column("headers").to_pylist()
            records: dict[str, list] = {f.name: [] for f in record_fields}
            schema_ids, errors, raw = [], [], []
            producer, seq, host, generated = [], [], [], []
            for value, hs in zip(values, headers):
                record, schema_id, error = self.decode(value)
                record = record or {}
                for f in record_fields:
                    v = record.get(f.name)
                    if f.name in self.json_columns and v is not None and not isinstance(v, str):
                        v = json.dumps(v, default=str)
                    records[f.name].append(v)
                schema_ids.append(schema_id)
                errors.append(error)
                raw.append(value if error else None)
                h = {x["key"]: x["value"] for x in hs} if hs else {}
                producer.append(_text(h.get("logbus.audit.producer")))
                seq.append(_int(h.get("logbus.audit.seq")))
                host.append(_text(h.get("logbus.audit.host")))
                generated.append(_int(h.get("logbus.audit.time")))
            columns = {f.name: pa.array(records[f.name], type=f.type) for f in record_fields}
            columns.update(_partition=batch.column("partition"), _offset=batch.column("offset"),
                           _timestamp=batch.column("timestamp"), _key=batch.column("key"), _schema_id=schema_ids,
                           _producer=producer, _seq=seq, _host=host, _generated=generated, _error=errors, _value=raw)
            arrays = [columns[f.name] if isinstance(columns[f.name], (pa.Array, pa.ChunkedArray))
                      else pa.array(columns[f.name], type=f.type) for f in arrow_schema]
            arrays = [a.cast(f.type) if a.type != f.type else a for a, f in zip(arrays, arrow_schema)]
            yield pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)


def _text(b: bytes | None) -> str | None:
    return b.decode(errors="replace") if b is not None else None


def _int(b: bytes | None) -> int | None:
    try:
        value = int(b) if b is not None else None
    except ValueError:
        return None
    return value if value is not None and -2**63 <= value < 2**63 else None  # beyond int64: unparsable

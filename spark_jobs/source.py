"""``spark.read.format("logbus")``: a PySpark Python Data Source that reads offset ranges [from, until) per
partition straight from the brokers (paper §4: the load job reads the brokers through a special input format).

Options follow Spark's own Kafka source: ``bootstrap.servers`` (or ``kafka.bootstrap.servers``), ``assign``
(JSON ``{"topic": [0, 1]}``: these partitions only), ``subscribe`` (comma list) or ``subscribePattern`` (regex),
``startingOffsets`` / ``endingOffsets`` as ``earliest`` /
``latest`` or JSON ``{"topic": {"0": 23, "1": -2}}`` (-2 earliest, -1 latest), ``maxRecordsPerPartition``
(split larger ranges into several Spark partitions, default 1,000,000) and ``includeHeaders`` (default true).
Any other option starting with ``kafka.`` is passed to the consumer without its prefix.

Two fetch paths: ``fetcher=auto`` (default) reads whole record batches with :mod:`spark_jobs.fetch` and parses
and decodes them column-wise (:mod:`spark_jobs.columnar`, :mod:`spark_jobs.avro_bulk`) when the client settings
are PLAINTEXT and nothing else (:func:`spark_jobs.fetch.supports`), else uses librdkafka record by record
(:func:`read_range`: SSL, SASL, any other ``kafka.`` setting); ``raw`` / ``librdkafka`` force one of them.

Offsets are resolved on the driver in ``partitions()``; ``read()`` only gets its (topic, partition, from,
until) and the consumer config, so it runs the same on ``local[*]`` and on a cluster's executors. It yields Arrow
record batches. A range that cannot be read completely (records deleted by retention, a broker that stays away)
fails the task rather than silently returning less.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from spark_jobs import fetch

EARLIEST, LATEST = -2, -1
SCHEMA = StructType([
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType(), False),
    StructField("partition", IntegerType(), False),
    StructField("offset", LongType(), False),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
    StructField("headers", ArrayType(StructType([StructField("key", StringType()),
                                                 StructField("value", BinaryType())]))),
])
BATCH = 10_000


class SourceError(ValueError):
    pass


@dataclass
class Range(InputPartition):
    topic: str
    partition: int
    start: int
    until: int

    def __init__(self, topic: str, partition: int, start: int, until: int):
        super().__init__((topic, partition, start, until))
        self.topic, self.partition, self.start, self.until = topic, partition, start, until


OPTION_NAMES = ("bootstrap.servers", "assign", "subscribe", "subscribePattern", "startingOffsets", "endingOffsets",
                "maxRecordsPerPartition", "includeHeaders", "groupIdPrefix", "fetcher", "valueFormat", "valueSchema",
                "schema.registry.url", "schema.registry.basic.auth.user.info", "schema.registry.ssl.ca.location",
                "schema.registry.ssl.certificate.location", "schema.registry.ssl.key.location")


def normalize(options) -> dict:
    """Spark hands options over case-insensitively (often lower-cased): restore the documented spelling."""
    canonical = {name.lower(): name for name in OPTION_NAMES}
    return {canonical.get(k.lower(), k): v for k, v in dict(options).items()}


def consumer_config(options: dict) -> dict:
    bootstrap = options.get("bootstrap.servers") or options.get("kafka.bootstrap.servers")
    if not bootstrap:
        raise SourceError("option bootstrap.servers is required")
    conf = {k[len("kafka."):]: v for k, v in options.items() if k.startswith("kafka.")}
    conf.update({"bootstrap.servers": bootstrap, "group.id": options.get("groupIdPrefix", "logbus-spark"),
                 "enable.auto.commit": False, "enable.partition.eof": True,
                 # committed records only, up to the last stable offset (what planning asks for): records of
                 # aborted transactions are never loaded; markers take offsets but are not records
                 "isolation.level": "read_committed"})
    return conf


def parse_offsets(spec: str | None, default: int, name: str) -> tuple[int, dict[str, dict[int, int]]]:
    """``earliest``/``latest`` or JSON; returns (default for unnamed partitions, explicit offsets)."""
    if spec is None or spec.strip() == "":
        return default, {}
    if spec.strip() in ("earliest", "latest"):
        return (EARLIEST if spec.strip() == "earliest" else LATEST), {}
    try:
        raw = json.loads(spec)
        return default, {t: {int(p): int(o) for p, o in parts.items()} for t, parts in raw.items()}
    except (ValueError, AttributeError, TypeError):
        raise SourceError(f"{name} must be earliest, latest or JSON like {{\"topic\": {{\"0\": 42}}}}, "
                          f"got {spec!r}") from None


def plan_ranges(options: dict, watermarks) -> list[tuple[str, int, int, int]]:
    """Resolve the options into (topic, partition, from, until); ``watermarks(topic, partition)`` gives
    (low, high) and ``topics()`` the cluster's {topic: partitions} (both injected for testing)."""
    topics_md = watermarks.topics()
    if sum(1 for k in ("assign", "subscribe", "subscribePattern") if options.get(k)) > 1:
        raise SourceError("only one of the options assign, subscribe or subscribePattern can be given")
    chosen: dict[str, list[int]] | None = None  # assign: these partitions only
    if options.get("assign"):
        try:
            chosen = {str(t): sorted({int(p) for p in ps}) for t, ps in json.loads(options["assign"]).items()}
        except (ValueError, AttributeError, TypeError):
            raise SourceError(f"assign must be JSON like {{\"topic\": [0, 1]}}, got {options['assign']!r}") from None
        wanted = sorted(chosen)
        for t in wanted:
            unknown = [p for p in chosen[t] if t not in topics_md or p not in topics_md[t]]
            if unknown:
                raise SourceError(f"unknown topic partition {t}[{unknown[0]}]")
    elif options.get("subscribe"):
        wanted = [t.strip() for t in options["subscribe"].split(",") if t.strip()]
        missing = [t for t in wanted if t not in topics_md]
        if missing:
            raise SourceError(f"unknown topic {missing[0]!r}")
    elif options.get("subscribePattern"):
        pattern = re.compile(options["subscribePattern"])
        wanted = sorted(t for t in topics_md if pattern.fullmatch(t))
    else:
        raise SourceError("one of the options assign, subscribe or subscribePattern is required")
    start_default, starts = parse_offsets(options.get("startingOffsets"), EARLIEST, "startingOffsets")
    end_default, ends = parse_offsets(options.get("endingOffsets"), LATEST, "endingOffsets")
    out = []
    for topic in wanted:
        for p in chosen[topic] if chosen is not None else sorted(topics_md[topic]):
            low, high = watermarks(topic, p)
            start = starts.get(topic, {}).get(p, start_default)
            until = ends.get(topic, {}).get(p, end_default)
            start = low if start == EARLIEST else high if start == LATEST else start
            until = low if until == EARLIEST else high if until == LATEST else until
            if start < low or until > high or start > until:
                raise SourceError(f"{topic}[{p}]: range [{start}, {until}) is outside the log [{low}, {high})")
            if until > start:
                out.append((topic, p, start, until))
    return out


class _Watermarks:
    def __init__(self, conf: dict):
        from confluent_kafka import Consumer

        self.consumer = Consumer(conf)

    def topics(self) -> dict[str, list[int]]:
        md = self.consumer.list_topics(timeout=20)
        return {t: list(m.partitions) for t, m in md.topics.items() if not m.error}

    def __call__(self, topic: str, partition: int) -> tuple[int, int]:
        from confluent_kafka import TopicPartition

        return self.consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=20)

    def close(self) -> None:
        self.consumer.close()


class LogbusDataSource(DataSource):
    counter = None  # (accumulator, window_ms) in the subclasses of counting()

    @classmethod
    def name(cls) -> str:
        return "logbus"

    def schema(self) -> StructType:
        decode = _decoding(normalize(self.options))
        if decode is None:
            return SCHEMA
        from spark_jobs.decode import table_schema

        return table_schema(decode[1])

    def reader(self, schema: StructType) -> "LogbusReader":
        return LogbusReader(self.options, self.counter)


def counting(accumulator, window_ms: int) -> type[LogbusDataSource]:
    """The source under the name ``logbus_counted``, whose reads also take the warehouse tier's counts of the
    rows they yield into ``accumulator`` (a :class:`spark_jobs.tier_counts.ByRange` accumulator): register it,
    read with ``format("logbus_counted")`` and a decoding ``valueFormat``. A class made here is pickled with its
    accumulator to the Python workers that plan and read."""
    return type("CountingLogbusDataSource", (LogbusDataSource,),
                {"counter": (accumulator, window_ms), "name": classmethod(lambda cls: "logbus_counted")})


class LogbusReader(DataSourceReader):
    def __init__(self, options, counter=None):
        self.counter = counter
        self.options = options = normalize(options)
        self.conf = consumer_config(options)
        self.headers = str(options.get("includeHeaders", "true")).lower() == "true"
        try:
            self.max_records = int(options.get("maxRecordsPerPartition", 1_000_000))
        except ValueError:
            raise SourceError("maxRecordsPerPartition must be an integer") from None
        self.decode = _decoding(options)
        self.fetcher = str(options.get("fetcher", "auto")).lower()
        if self.fetcher not in ("auto", "raw", "librdkafka"):
            raise SourceError(f"fetcher must be auto, raw or librdkafka, got {self.fetcher!r}")
        if counter is not None and self.decode is None:
            raise SourceError("the counting source needs valueFormat=confluent-avro (it counts the audit columns)")

    def partitions(self) -> list[Range]:
        marks = _Watermarks(self.conf)
        try:
            ranges = plan_ranges(self.options, marks)
        finally:
            marks.close()
        out = []
        for topic, p, start, until in ranges:
            for s in range(start, until, self.max_records):
                out.append(Range(topic, p, s, min(s + self.max_records, until)))
        return out or [Range("", -1, 0, 0)]  # Spark wants at least one partition

    def read(self, partition: Range):
        if self.counter is None:
            yield from self._read(partition)
            return
        from spark_jobs.tier_counts import RangeCounts

        accumulator, window_ms = self.counter
        counts = RangeCounts(window_ms)
        for batch in self._read(partition):
            counts.add(batch)
            yield batch
        # only a range read to its end is counted, once per range however often Spark runs it
        accumulator.add({(partition.topic, partition.partition, partition.start, partition.until): counts.result()})

    def _read(self, partition: Range):
        if partition.until <= partition.start:
            return
        raw = self.fetcher == "raw" or (self.fetcher == "auto" and fetch.supports(self.conf))
        if raw:
            from spark_jobs import columnar

            from spark_jobs.avro_bulk import AUDIT

            chunks = fetch.records(self.conf, partition.topic, partition.partition, partition.start, partition.until,
                                   names=tuple(AUDIT.values()) if self.decode is not None else ())
            if self.decode is None:
                schema = columnar.raw_schema()
                for r in chunks:
                    if len(r):
                        yield columnar.raw_batch(r, partition.topic, partition.partition, schema, self.headers)
                return
        else:
            batches = read_range(self.conf, partition.topic, partition.partition, partition.start, partition.until,
                                 self.headers or self.decode is not None)
            if self.decode is None:
                yield from batches
                return
        from pyspark.sql.pandas.types import to_arrow_schema

        from spark_jobs.decode import Decoder, table_schema

        registry_url, reader_schema = self.decode
        arrow_schema = to_arrow_schema(table_schema(reader_schema), timezone="UTC")
        decoder = Decoder(registry_url, reader_schema)
        if raw:
            yield from decoder.record_batches(chunks, partition.topic, partition.partition, arrow_schema)
        else:
            yield from decoder.batches(batches, arrow_schema)


def _decoding(options: dict) -> tuple[dict, dict | None] | None:
    """``valueFormat=confluent-avro`` (with ``schema.registry.url`` — and ``schema.registry.basic.auth.user.info``,
    ``schema.registry.ssl.ca.location`` for a secured registry — and the reader schema as ``valueSchema`` JSON,
    ``null`` when the subject has none): decode in ``read()`` and output the warehouse columns of
    :func:`spark_jobs.decode.table_schema` instead of the raw record columns — one Python hop instead of two."""
    fmt = options.get("valueFormat")
    if fmt in (None, "", "binary"):
        return None
    if fmt != "confluent-avro":
        raise SourceError(f"valueFormat must be binary or confluent-avro, got {fmt!r}")
    if not options.get("schema.registry.url"):
        raise SourceError("valueFormat=confluent-avro needs the option schema.registry.url")
    from settings.registry_client import registry_conf

    try:
        return registry_conf(options), json.loads(options.get("valueSchema") or "null")
    except ValueError:
        raise SourceError("valueSchema must be the reader schema as JSON") from None


def read_range(conf: dict, topic: str, partition: int, start: int, until: int, headers: bool = True):
    """Arrow batches of the records in [start, until) of one partition (runs on an executor)."""
    import pyarrow as pa
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    arrow_schema = pa.schema([
        ("key", pa.binary()), ("value", pa.binary()), pa.field("topic", pa.string(), False),
        pa.field("partition", pa.int32(), False), pa.field("offset", pa.int64(), False),
        ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32()),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    ])
    consumer = Consumer({**conf, "fetch.max.bytes": 52428800})
    consumer.assign([TopicPartition(topic, partition, start)])
    cols: dict[str, list] = {name: [] for name in arrow_schema.names}
    position, idle = start, 0
    try:
        while position < until:
            msgs = consumer.consume(min(BATCH, until - position), timeout=1.0)
            if not msgs:
                idle += 1
                if idle > 60:
                    raise RuntimeError(f"{topic}[{partition}]: no data for 60 s at offset {position} (until {until})")
                continue
            idle = 0
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        if m.offset() < until:
                            raise RuntimeError(f"{topic}[{partition}]: log ends at {m.offset()} before {until}")
                        position = until  # the offsets left were transaction markers or aborted records
                        break
                    raise RuntimeError(f"{topic}[{partition}]: {err}")
                off = m.offset()
                if off < position:
                    continue
                if off >= until:
                    position = until
                    break
                position = off + 1
                ts_type, ts = m.timestamp()
                cols["key"].append(m.key())
                cols["value"].append(m.value())
                cols["topic"].append(topic)
                cols["partition"].append(partition)
                cols["offset"].append(off)
                cols["timestamp"].append(ts * 1000 if ts_type else None)
                cols["timestampType"].append(ts_type - 1 if ts_type else None)
                cols["headers"].append([{"key": k, "value": v} for k, v in (m.headers() or [])] if headers else None)
            if len(cols["offset"]) >= BATCH:
                yield pa.RecordBatch.from_pydict(cols, schema=arrow_schema)
                cols = {name: [] for name in arrow_schema.names}
        if cols["offset"]:
            yield pa.RecordBatch.from_pydict(cols, schema=arrow_schema)
    finally:
        consumer.close()

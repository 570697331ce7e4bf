"""``logbus mirror`` (the shape of Kafka's classic mirror tool) and ``logbus mirror-translate``."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path


def read_properties(path: str) -> dict[str, str]:
    from settings.properties import ConfigError, parse_properties

    try:
        out = parse_properties(Path(path).read_text())
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from None
    except ConfigError as exc:
        raise ValueError(f"{path}: {exc}") from None
    if "bootstrap.servers" not in out:
        raise ValueError(f"{path}: bootstrap.servers is required")
    from settings.security import librdkafka_config

    try:
        return librdkafka_config(out)  # Kafka's Java security keys work too
    except ConfigError as exc:
        raise ValueError(f"{path}: {exc}") from None


def run(args) -> int:
    from mirror.mirror import Mirror, status_json

    try:
        consumer = read_properties(args.consumer_config)
        producer = read_properties(args.producer_config)
    except ValueError as exc:
        print(f"logbus: {exc}", file=sys.stderr)
        return 2
    from confluent_kafka import KafkaException

    try:
        mirror = Mirror(consumer, producer, args.whitelist, args.blacklist, args.num_streams, args.source_name,
                        args.checkpoint_topic, exactly_once=getattr(args, "exactly_once", False),
                        instance_id=getattr(args, "instance_id", "0"),
                        transaction_interval_ms=getattr(args, "transaction_interval_ms", 100),
                        copy=getattr(args, "copy", "batches"))
    except (ValueError, KafkaException) as exc:  # a bad pattern or client setting: retrying cannot help
        reason = exc.args[0].str() if isinstance(exc, KafkaException) else str(exc)
        print(f"logbus: mirror config error: {reason}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: mirror.stop())
    from mirror.metrics import families
    from telemetry.exposition import MetricsServer

    try:
        metrics = MetricsServer(getattr(args, "metrics_listener", "") or "",
                                lambda: families(mirror.counters.snapshot(), args.source_name))
        metrics.start()
    except (ValueError, OSError) as exc:
        print(f"logbus: mirror config error: {exc}", file=sys.stderr)
        return 2

    def status(snapshot: dict) -> None:
        if args.stats_file:
            tmp = Path(args.stats_file + ".tmp")
            tmp.write_text(status_json(snapshot))
            tmp.replace(args.stats_file)

    try:
        mirror.run(status_callback=status)  # returns only once told to stop
    except KeyboardInterrupt:
        mirror.stop()
    finally:
        metrics.stop()
    return 0


def translate(args) -> int:
    from mirror.checkpoints import translate_group

    result = translate_group(args.source_bootstrap, args.target_bootstrap, args.group, args.source_name,
                             args.checkpoint_topic, apply=args.apply)
    print(json.dumps([{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(result.items())]))
    return 0

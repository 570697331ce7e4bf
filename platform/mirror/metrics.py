"""The mirror's metrics (``logbus mirror --metrics-listener http://HOST:PORT``), from its counters at scrape time:
records and bytes copied, lag per source partition (log end minus the mirror's position), errors, restarts,
refused commits and transactions. Labelled with the source datacenter (``--source-name``)."""

from __future__ import annotations

from telemetry.exposition import counter, gauge


def families(snapshot: dict, source: str) -> list:
    lag = []
    for key, value in sorted(snapshot["lag"].items()):
        topic, _, partition = key.rpartition("-")
        lag.append(((source, topic, partition), value))
    one = [((source, ), None)]
    out = [counter(f"logbus_mirror_{name}", doc, labels=["source"], values=[(k, snapshot[field]) for k, _ in one])
           for name, field, doc in (
               ("records", "records", "Records copied to the target and committed."),
               ("bytes", "bytes", "Bytes (keys and values) of the records copied."),
               ("errors", "errors", "Errors a stream met (each restarts the stream)."),
               ("restarts", "restarts", "Stream restarts after an error."),
               ("commit_failures", "commit_failures", "Offset commits the source refused."),
               ("transactions", "transactions", "Transactions committed (--exactly-once)."),
               ("aborted_transactions", "aborted_transactions", "Transactions aborted (--exactly-once)."))]
    out.append(gauge("logbus_mirror_lag_records", "Records behind the source's log end, per source partition.",
                     labels=["source", "topic", "partition"], values=lag))
    out.append(gauge("logbus_mirror_lag_records_total", "Records behind the source, all partitions together.",
                     labels=["source"], values=[((source, ), snapshot["total_lag"])]))
    return out

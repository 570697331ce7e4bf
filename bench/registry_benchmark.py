"""Load test of the schema registry: one broker and one registry process on this machine, one client.

- registrations/s: --schemas distinct Avro schemas registered one after another over HTTP (each is a Kafka
  write that the registry reads back before answering);
- lookups/s with a cold client cache: GET /schemas/ids/{id} over HTTP for every lookup (requests.Session,
  keep-alive), and POST /subjects/{s} (lookup by schema, which parses and canonicalises the schema);
- lookups/s with a warm client cache: confluent-kafka's SchemaRegistryClient.get_schema(id) after a first
  fetch (what a deserializer does for every message: served from the client's cache);
- cold start: time for a restarted registry to replay the topic and answer.

Usage: .venv/bin/python bench/registry_benchmark.py [--schemas 500] [--lookups 5000] [--out bench/results]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests")]

import requests  # noqa: E402
from confluent_kafka.schema_registry import SchemaRegistryClient  # noqa: E402
from support import BrokerProcess, RegistryProcess  # noqa: E402


def schema(i: int) -> str:
    return json.dumps({"type": "record", "name": f"Event{i}", "namespace": "bench",
                       "fields": [{"name": "id", "type": "long"}, {"name": f"field{i}", "type": "string"}]})


def rate(count: int, seconds: float) -> float:
    return count / seconds


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--schemas", type=int, default=500)
    parser.add_argument("--lookups", type=int, default=5000)
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    args = parser.parse_args()
    results: dict = {"command": "python bench/registry_benchmark.py " + " ".join(sys.argv[1:]),
                     "schemas": args.schemas, "lookups": args.lookups}
    headers = {"Content-Type": "application/vnd.schemaregistry.v1+json"}
    with tempfile.TemporaryDirectory(prefix="logbus-registry-bench-") as work:
        broker = BrokerProcess(Path(work) / "broker").start()
        reg = RegistryProcess(Path(work) / "registry", broker.bootstrap, kafkastore_timeout_ms="10000").start()
        try:
            http = requests.Session()
            start = time.perf_counter()
            ids = []
            for i in range(args.schemas):
                r = http.post(f"{reg.url}/subjects/s{i}/versions", json={"schema": schema(i)}, headers=headers)
                r.raise_for_status()
                ids.append(r.json()["id"])
            results["registrations_per_s"] = rate(args.schemas, time.perf_counter() - start)
            start = time.perf_counter()
            for n in range(args.lookups):
                http.get(f"{reg.url}/schemas/ids/{ids[n % len(ids)]}").raise_for_status()
            results["get_by_id_http_per_s"] = rate(args.lookups, time.perf_counter() - start)
            start = time.perf_counter()
            count = min(args.lookups, 2000)
            for n in range(count):
                i = n % args.schemas
                http.post(f"{reg.url}/subjects/s{i}", json={"schema": schema(i)}, headers=headers).raise_for_status()
            results["lookup_by_schema_http_per_s"] = rate(count, time.perf_counter() - start)
            client = SchemaRegistryClient({"url": reg.url})
            for sid in ids:
                client.get_schema(sid)  # fill the client's cache
            start = time.perf_counter()
            for n in range(args.lookups * 20):
                client.get_schema(ids[n % len(ids)])
            results["get_by_id_client_cache_per_s"] = rate(args.lookups * 20, time.perf_counter() - start)
            reg.stop()
            start = time.perf_counter()
            reg.start()
            http.get(f"{reg.url}/schemas/ids/{ids[-1]}").raise_for_status()
            results["cold_start_s"] = time.perf_counter() - start
        finally:
            reg.stop()
            broker.stop()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "registry_benchmark.json").write_text(json.dumps(results, indent=1) + "\n")
    write(results, out)
    print((out / "registry_benchmark.md").read_text())
    return 0


def write(r: dict, out: Path) -> None:
    rows = [("registrations (POST /subjects/{s}/versions, distinct schemas)", r["registrations_per_s"]),
            ("lookups by id over HTTP, client cache cold (GET /schemas/ids/{id})", r["get_by_id_http_per_s"]),
            ("lookups by schema over HTTP (POST /subjects/{s})", r["lookup_by_schema_http_per_s"]),
            ("lookups by id, SchemaRegistryClient cache warm", r["get_by_id_client_cache_per_s"])]
    lines = ["# Schema registry load test (one broker, one registry, one client, same 2-core machine)", "",
             f"Command: `{r['command']}`; {r['schemas']} schemas, {r['lookups']} lookups per HTTP test.", "",
             "| operation | per second |", "|---|---|"]
    lines += [f"| {label} | {value:,.0f} |" for label, value in rows]
    lines += ["", f"Cold start: a restarted registry replayed {r['schemas']} records and answered in "
              f"{r['cold_start_s']:.2f} s (process start included).", ""]
    (out / "registry_benchmark.md").write_text("\n".join(lines))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4))
    labels = ["register", "GET by id\n(HTTP)", "lookup by schema\n(HTTP)", "GET by id\n(client cache)"]
    values = [v for _, v in rows]
    ax.bar(labels, values)
    ax.set_yscale("log")
    ax.set_ylabel("operations / second (log scale)")
    ax.set_title("Schema registry: cold (HTTP) and warm (client cache) lookups, registrations")
    for i, v in enumerate(values):
        ax.text(i, v, f"{v:,.0f}", ha="center", va="bottom", fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "registry_benchmark.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())

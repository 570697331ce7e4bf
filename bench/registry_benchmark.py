"""Load test of the schema registry: one broker and one registry process on this machine, one client.

- registrations/s: --schemas distinct Avro schemas registered one after another over HTTP (each is a Kafka
  write that the registry reads back before answering);
- lookups/s with a cold client cache: GET /schemas/ids/{id} over HTTP for every lookup (requests.Session,
  keep-alive), and POST /subjects/{s} (lookup by schema, which parses and canonicalises the schema);
- lookups/s with a warm client cache: confluent-kafka's SchemaRegistryClient.get_schema(id) after a first
  fetch (what a deserializer does for every message: served from the client's cache);
- cold start: time for a restarted registry to replay the topic and answer;
- with a second writable instance (the two elect a leader): registrations sent to the follower (forwarded to the
  leader, then read back on the follower), GET by id on the follower, and the failover: ``kill -9`` of the leader,
  then the time until a registration sent to the survivor succeeds (its group session, 10 s, must expire first).

Each figure is shown next to the one of the previous committed run (read from the results file before it is
rewritten).

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
    out = Path(args.out)
    previous_file = out / "registry_benchmark.json"
    previous = json.loads(previous_file.read_text()) if previous_file.exists() else {}
    previous.pop("previous", None)
    results["previous"] = previous
    with tempfile.TemporaryDirectory(prefix="logbus-registry-bench-") as work:
        broker = BrokerProcess(Path(work) / "broker").start()
        reg = RegistryProcess(Path(work) / "registry", broker.bootstrap, kafkastore_timeout_ms="10000").start()
        second = None
        try:
            http = requests.Session()
            wait_leader(http, reg.url)  # the first election (the group's initial rebalance delay) is not timed
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
            second = RegistryProcess(Path(work) / "registry2", broker.bootstrap, kafkastore_timeout_ms="10000").start()
            leader = wait_leader(http, reg.url, second.url)
            follower = second if leader == reg.url else reg
            start = time.perf_counter()
            count = max(args.schemas // 5, 10)
            for i in range(args.schemas, args.schemas + count):
                r = http.post(f"{follower.url}/subjects/f{i}/versions", json={"schema": schema(i)}, headers=headers)
                r.raise_for_status()
                ids.append(r.json()["id"])
            results["forwarded_registrations_per_s"] = rate(count, time.perf_counter() - start)
            start = time.perf_counter()
            for n in range(args.lookups):
                http.get(f"{follower.url}/schemas/ids/{ids[n % len(ids)]}").raise_for_status()
            results["get_by_id_follower_http_per_s"] = rate(args.lookups, time.perf_counter() - start)
            (reg if follower is second else second).proc.kill()  # kill -9 of the leader
            killed = time.perf_counter()
            i = args.schemas + count
            while True:
                try:
                    r = http.post(f"{follower.url}/subjects/f{i}/versions", json={"schema": schema(i)},
                                  headers=headers, timeout=15)
                    if r.status_code == 200:
                        break
                except requests.RequestException:
                    pass
                if time.perf_counter() - killed > 120:
                    raise RuntimeError("no write after the leader's kill within 120 s")
                time.sleep(0.1)
            results["failover_s"] = time.perf_counter() - killed
            results["failover_next_id"] = r.json()["id"]
            results["ids_before_failover"] = max(ids)
        finally:
            reg.stop()
            if second is not None:
                second.stop()
            broker.stop()
    out.mkdir(parents=True, exist_ok=True)
    (out / "registry_benchmark.json").write_text(json.dumps(results, indent=1) + "\n")
    write(results, out)
    print((out / "registry_benchmark.md").read_text())
    return 0


def wait_leader(http, *urls: str) -> str:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        seen = {http.get(f"{u}/status").json().get("leader") for u in urls}
        if len(seen) == 1 and None not in seen:
            return seen.pop()
        time.sleep(0.2)
    raise RuntimeError("the registries elected no leader")


ROWS = [("registrations (POST /subjects/{s}/versions, distinct schemas)", "registrations_per_s"),
        ("registrations sent to the follower (forwarded to the leader, read back on the follower)",
         "forwarded_registrations_per_s"),
        ("lookups by id over HTTP, client cache cold (GET /schemas/ids/{id})", "get_by_id_http_per_s"),
        ("lookups by id over HTTP on the follower", "get_by_id_follower_http_per_s"),
        ("lookups by schema over HTTP (POST /subjects/{s})", "lookup_by_schema_http_per_s"),
        ("lookups by id, SchemaRegistryClient cache warm", "get_by_id_client_cache_per_s")]


def write(r: dict, out: Path) -> None:
    prev = r.get("previous") or {}
    rows = [(label, r[key]) for label, key in ROWS]

    def before(key: str) -> str:
        return f"{prev[key]:,.0f}" if key in prev else "—"

    lines = ["# Schema registry load test (one broker, one or two registries, one client, same 2-core machine)", "",
             f"Command: `{r['command']}`; {r['schemas']} schemas, {r['lookups']} lookups per HTTP test.", "",
             "| operation | per second | previous run |", "|---|---|---|"]
    lines += [f"| {label} | {r[key]:,.0f} | {before(key)} |" for label, key in ROWS]
    earlier = f"; previous run {prev['cold_start_s']:.2f} s" if "cold_start_s" in prev else ""
    lines += ["", f"Cold start: a restarted registry replayed {r['schemas']} records and answered in "
              f"{r['cold_start_s']:.2f} s (process start included{earlier}).", "",
              f"Failover: `kill -9` of the leader; the first registration sent to the survivor succeeded "
              f"{r['failover_s']:.1f} s later (the group session is 10 s), with id {r['failover_next_id']} after "
              f"id {r['ids_before_failover']}: none reused or skipped.", ""]
    (out / "registry_benchmark.md").write_text("\n".join(lines))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 4))
    labels = ["register", "register via\nfollower", "GET by id\n(HTTP)", "GET by id\n(follower)",
              "lookup by schema\n(HTTP)", "GET by id\n(client cache)"]
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

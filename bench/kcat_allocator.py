"""kcat's consume and its memory allocator: how much of the 4M msg/s goal's bound is glibc's malloc (issue 20).

librdkafka's fetch thread parses each FetchResponse into one allocation per message and queues them; kcat's main
thread takes them off the queue and frees them. glibc's malloc gives each thread an arena, and a free from another
thread than the one that allocated takes the owning arena's lock: when the two threads collide it is a futex wait
and a wake-up (``__lll_lock_wait_private`` / ``__lll_lock_wake_private``). Allocators with per-thread caches for
remote frees do not take that lock.

Per round, on one standalone broker of this tree, for each topic (``--messages`` messages of 200 bytes, one
partition: the paper benchmark's ``bench-batch50`` topic, batches of 50, and its ``bench-kcat`` topic, kcat's own
batches of ~4,700), kcat consumes the whole topic as the paper benchmark does
(``benchkit.logbus_side.consume_kcat``'s command) once with each allocator: glibc's (kcat as installed), and
Debian's jemalloc, tcmalloc (minimal) and mimalloc, each preloaded with ``LD_PRELOAD`` into the same kcat binary.
The order of the allocators turns by one each round. Each run is timed from kcat's start to its exit, under
``perf stat`` (kcat's CPU time, context switches, page faults). Then one ``perf record -g`` of a glibc run and of
a jemalloc run on ``bench-kcat``: the share of kcat's samples under the arena lock's wait and wake, and in
malloc/calloc/free.

Usage: .venv/bin/python bench/kcat_allocator.py [--messages 1000000] [--rounds 5] [--out bench/results/kcat_allocator]
       | --report-only
(installs libjemalloc2, libtcmalloc-minimal4, libmimalloc2.0 and linux-perf when missing: root or sudo)
Results: <out>/kcat_allocator.{json,md,png}
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "bench"), str(REPO / "tests")]

from benchkit import logbus_side, perf, rounds_cli  # noqa: E402
from benchkit.peers import JEMALLOC  # noqa: E402
from kcat_consume_cycle import kcat_command  # noqa: E402
from paper_benchmark import SIZE, produce_kcat  # noqa: E402
from request_cost import start_broker  # noqa: E402

LIB = Path(JEMALLOC).parent  # the architecture's library directory
ALLOCATORS = {"glibc": (None, None), "jemalloc": (Path(JEMALLOC), "libjemalloc2"),
              "tcmalloc": (LIB / "libtcmalloc_minimal.so.4", "libtcmalloc-minimal4"),
              "mimalloc": (LIB / "libmimalloc.so.2", "libmimalloc2.0")}
TOPICS = ("bench-batch50", "bench-kcat")
SYMBOLS = ("__lll_lock_wait_private", "__lll_lock_wake_private", "__libc_malloc", "__libc_calloc", "_int_malloc",
           "_int_free", "cfree@GLIBC_2.2.5")
COUNTERS = ("task-clock", "context-switches", "page-faults")


def install() -> None:
    missing = [pkg for path, pkg in ALLOCATORS.values() if path and not path.exists()]
    if subprocess.run(["which", "perf"], capture_output=True).returncode:
        missing.append("linux-perf")
    if missing:
        sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
        subprocess.run([*sudo, "apt-get", "install", "-y", "--no-install-recommends", *missing], check=True,
                       env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"), stdout=subprocess.DEVNULL)


def env_for(allocator: str) -> dict:
    path = ALLOCATORS[allocator][0]
    return {**os.environ, **({"LD_PRELOAD": str(path)} if path else {})}


def one_run(cmd: list[str], allocator: str, count: int) -> dict:
    start = time.perf_counter()
    done = subprocess.run(["perf", "stat", "-x,", "-e", ",".join(COUNTERS), *cmd], env=env_for(allocator),
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=600)
    seconds = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(f"kcat ({allocator}) failed: {done.stderr[-500:]}")
    stats = {}
    for line in done.stderr.splitlines():
        fields = line.split(",")
        if len(fields) > 2 and fields[2] in COUNTERS:
            stats[fields[2].replace("-", "_")] = float(fields[0])
    return {"seconds": round(seconds, 4), "msg_s": round(count / seconds), "cpu_ms": round(stats["task_clock"], 1),
            "context_switches": int(stats["context_switches"]), "page_faults": int(stats["page_faults"])}


def profile(cmd: list[str], allocator: str, data: Path) -> dict:
    subprocess.run(["perf", "record", "-F", "4999", "-g", "-o", str(data), *cmd], env=env_for(allocator),
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, timeout=600)
    return perf.shares(data, SYMBOLS)


def measure(args) -> dict:
    install()
    work = Path(tempfile.mkdtemp(prefix="kcat-allocator-"))
    broker, _ = start_broker(work / "broker", REPO / "platform")
    names = list(ALLOCATORS)
    try:
        logbus_side.produce(broker, "bench-batch50", args.messages, SIZE, logbus_side.RUNS["batch50"])
        produce_kcat(broker, "bench-kcat", args.messages, work)
        rounds = []
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            rnd = {}
            for topic in TOPICS:
                cmd = kcat_command(broker.bootstrap, topic, args.messages)
                rnd[topic] = {a: one_run(cmd, a, args.messages) for a in order}
                print(r, topic, {a: v["msg_s"] for a, v in rnd[topic].items()}, flush=True)
            rounds.append(rnd)
        cmd = kcat_command(broker.bootstrap, "bench-kcat", args.messages)
        profiles = {a: profile(cmd, a, work / f"perf-{a}.data") for a in ("glibc", "jemalloc")}
    finally:
        broker.stop()
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    kcat = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "kcat"], capture_output=True, text=True).stdout
    return {"command": f"python bench/kcat_allocator.py --messages {args.messages} --rounds {args.rounds} "
                       f"--out {args.out.relative_to(REPO) if args.out.is_relative_to(REPO) else args.out}",
            "commit": head, "kcat": kcat, "messages": args.messages, "rounds": rounds, "profiles": profiles}


def med(rounds: list[dict], topic: str, allocator: str, key: str) -> tuple[float, float, float]:
    vals = [r[topic][allocator][key] for r in rounds]
    return statistics.median(vals), min(vals), max(vals)


def write_report(results: dict, out: Path) -> None:
    rounds = results["rounds"]
    lines = [
        "# kcat's consume and its memory allocator (issue 20's 4M msg/s goal)", "",
        f"Command: `{results['command']}` (code of commit {results['commit']}; kcat {results['kcat']}, Debian's, "
        f"linking librdkafka 2.0.2); {results['messages']:,} messages of 200 bytes per topic, one partition, one "
        f"standalone broker; {len(rounds)} rounds, the allocators' order turned by one each round; median "
        "[min–max]. Method: `bench/kcat_allocator.py`'s docstring.", "",
        "| topic | allocator (LD_PRELOAD into the same kcat) | msg/s | vs glibc, same rounds | kcat CPU ms | "
        "context switches | page faults |",
        "|---|---|---|---|---|---|---|"]
    for topic in TOPICS:
        for a in ALLOCATORS:
            rate = med(rounds, topic, a, "msg_s")
            ratios = [r[topic][a]["msg_s"] / r[topic]["glibc"]["msg_s"] for r in rounds]
            cells = [f"{rate[0]:,.0f} [{rate[1]:,.0f}–{rate[2]:,.0f}]", f"{statistics.median(ratios):.2f}x"]
            for key in ("cpu_ms", "context_switches", "page_faults"):
                m = med(rounds, topic, a, key)
                cells.append(f"{m[0]:,.0f} [{m[1]:,.0f}–{m[2]:,.0f}]")
            lines.append(f"| `{topic}` | {a} | " + " | ".join(cells) + " |")
    lines += ["", "Where kcat's time goes on `bench-kcat` (one `perf record -g` run each; % of kcat's samples, "
              "inclusive of callees):", "", "| symbol | glibc | jemalloc |", "|---|---|---|"]
    for sym in SYMBOLS:
        lines.append(f"| `{sym}` | {results['profiles']['glibc']['shares'][sym]:.1f} | "
                     f"{results['profiles']['jemalloc']['shares'][sym]:.1f} |")
    for a in ("glibc", "jemalloc"):
        lines += ["", f"Heaviest symbols by their own samples, {a} run: " + ", ".join(
            f"`{s}` {p:.1f}%" for s, _, p in results["profiles"][a]["top_self"][:6]) + "."]
    lines += ["",
        "The broker is the same in every run: what changes is the client's allocator. The 4M goal is about kcat; "
        "a kcat with another allocator is still Debian's kcat binary, but not kcat as installed.", "",
        "Plot: `kcat_allocator.png`.", ""]
    (out / "kcat_allocator.md").write_text("\n".join(lines))
    plot(results, out)


def plot(results: dict, out: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    width = 0.8 / len(ALLOCATORS)
    for i, a in enumerate(ALLOCATORS):
        meds = [med(results["rounds"], t, a, "msg_s") for t in TOPICS]
        ax.bar([x + i * width for x in range(len(TOPICS))], [m[0] / 1e6 for m in meds], width, label=a,
               yerr=[[(m[0] - m[1]) / 1e6 for m in meds], [(m[2] - m[0]) / 1e6 for m in meds]], capsize=3)
    ax.axhline(4.0, color="grey", linestyle="--", label="issue 20's goal")
    ax.set_xticks([x + width * (len(ALLOCATORS) - 1) / 2 for x in range(len(TOPICS))], TOPICS)
    ax.set_ylabel("kcat consume, million msg/s")
    ax.set_title("kcat consume by allocator (median, min–max)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "kcat_allocator.png", dpi=110)


def main() -> int:
    return rounds_cli.run("kcat_allocator", measure, write_report)


if __name__ == "__main__":
    raise SystemExit(main())

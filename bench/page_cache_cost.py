"""What writing into the page cache costs on this machine, and how much of a produce it is (issue 20).

Every produced byte is written into the partition's segment file, so into new page-cache pages. On this machine
(a VM whose balloon device reports free memory back to the host: the guest's ``virtio_balloon`` with free page
reporting), a page the guest has not used lately may first have to be backed by the host again, which the guest
sees as a slow copy. Two measurements:

1. ``benchkit.machine.page_cache_write`` in ``--rounds`` rounds, ``--pause`` seconds apart: CPU ms per MB of 1 MB
   writes into a new file (``fresh``), over the same file again (``overwrite``: cached pages) and into another new
   file just after the first was deleted (``recycled``: pages freed a moment ago).
2. One standalone broker of this tree takes ``--messages`` 200-byte messages from kcat (the paper benchmark's
   kcat producer: librdkafka batching, batches of about 1 MB, acks=1) while ``perf record -g`` samples it. The
   report gives the share of the broker's samples under the kernel's buffered file write
   (``generic_perform_write``: the copy into the page cache and its bookkeeping), its copy alone
   (``copy_folio_from_iter_atomic``), the interpreter's loop (``_PyEval_EvalFrameDefault``; Debian's python3 has
   no frame pointers, so perf cannot tell which C code the interpreter called), and the socket receive
   (``tcp_recvmsg``); and the heaviest symbols by their own samples.

Usage: .venv/bin/python bench/page_cache_cost.py [--messages 2000000] [--rounds 5] [--pause 5]
       [--out bench/results/page_cache_cost] | --report-only
(needs perf: ``apt-get install -y linux-perf``, run as root or with kernel.perf_event_paranoid <= 1)
Results: <out>/page_cache_cost.{json,md,png}
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "bench"), str(REPO / "tests")]

from benchkit import perf  # noqa: E402
from benchkit.machine import page_cache_write  # noqa: E402
from paper_benchmark import produce_kcat  # noqa: E402
from request_cost import start_broker  # noqa: E402

STATES = ("fresh", "overwrite", "recycled")
SYMBOLS = {  # report label: kernel or interpreter symbol whose inclusive share is reported
    "buffered file write (generic_perform_write)": "generic_perform_write",
    "of which the copy into the page cache (copy_folio_from_iter_atomic)": "copy_folio_from_iter_atomic",
    "socket receive (tcp_recvmsg)": "tcp_recvmsg",
    "the interpreter's loop (_PyEval_EvalFrameDefault; perf cannot unwind the C it calls)":
        "_PyEval_EvalFrameDefault",
}


def broker_under_perf(work: Path, messages: int) -> dict:
    broker, _ = start_broker(work / "broker", REPO / "platform")
    try:
        time.sleep(1)
        perf_data = work / "perf.data"
        with perf.Recording(broker.proc.pid, perf_data):
            time.sleep(1)
            result = produce_kcat(broker, "bench-kcat", messages, work)
    finally:
        broker.stop()
    return {"msg_s": result["msg_per_s"], "broker_cpu_s": result["broker_cpu_s"],
            **perf.shares(perf_data, list(SYMBOLS.values()))}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--messages", type=int, default=2_000_000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--pause", type=float, default=5.0)
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "page_cache_cost")
    p.add_argument("--report-only", action="store_true", help="rewrite the report from the saved JSON")
    args = p.parse_args()
    if args.report_only:
        write_report(json.loads((args.out / "page_cache_cost.json").read_text()), args.out)
        return 0
    work = Path(tempfile.mkdtemp(prefix="page-cache-"))
    probes = []
    for i in range(args.rounds):
        if i:
            time.sleep(args.pause)
        probes.append(page_cache_write(work))
        print("probe", probes[-1], flush=True)
    broker = broker_under_perf(work, args.messages)
    print("broker", broker, flush=True)
    probes.append(page_cache_write(work))  # the machine's state right after the broker run
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    out_arg = args.out.relative_to(REPO) if args.out.is_relative_to(REPO) else args.out
    results = {"command": f"python bench/page_cache_cost.py --messages {args.messages} --rounds {args.rounds} "
                          f"--pause {args.pause:g} --out {out_arg}",
               "commit": head, "probes": probes, "broker": broker, "messages": args.messages}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "page_cache_cost.json").write_text(json.dumps(results, indent=1) + "\n")
    write_report(results, args.out)
    print((args.out / "page_cache_cost.md").read_text())
    return 0


def write_report(r: dict, out: Path) -> None:
    probes = r["probes"]
    lines = ["# Writing into the page cache: what it costs here, and its share of a produce (issue 20)", "",
             f"Command: `{r['command']}` (commit {r['commit']}).", "",
             f"CPU ms per MB of 1 MB buffered writes (`benchkit.machine.page_cache_write`); {len(probes) - 1} "
             "rounds before the broker run, the last row right after it:", "",
             "| round | fresh (new file) | overwrite (cached pages) | recycled (new file, pages just freed) | "
             "fresh / overwrite |", "|---|---|---|---|---|"]
    for i, probe in enumerate(probes):
        label = "after the broker run" if i == len(probes) - 1 else str(i + 1)
        lines.append(f"| {label} | {probe['fresh']:.3f} | {probe['overwrite']:.3f} | {probe['recycled']:.3f} | "
                     f"{probe['fresh'] / probe['overwrite']:.1f}x |")
    med = {s: statistics.median(p[s] for p in probes) for s in STATES}
    b = r["broker"]
    per_gb = b["broker_cpu_s"] / (r["messages"] * 200 / 1e9)
    lines += ["", f"Medians: fresh {med['fresh']:.3f}, overwrite {med['overwrite']:.3f}, recycled "
              f"{med['recycled']:.3f} ms per MB.", "",
              f"The broker under `perf record -g` (999 Hz, {b['samples']} samples) while kcat produced "
              f"{r['messages']:,} messages of 200 bytes ({b['msg_s']:,.0f} msg/s, broker CPU {per_gb:.2f} s per "
              "GB): share of the broker's samples under each (inclusive; the rows overlap where one calls the "
              "other):", "", "| where | share of the broker's samples |", "|---|---|"]
    for label, symbol in SYMBOLS.items():
        lines.append(f"| {label} | {b['shares'][symbol]:.1f}% |")
    lines += ["", "The heaviest symbols by their own samples (`perf report --no-children`; hex addresses are code "
              "perf cannot name: the compiled (numba) record kernels, or stripped libraries):", "",
              "| symbol | where | share |", "|---|---|---|"]
    for symbol, where, share in b.get("top_self", []):
        lines.append(f"| `{symbol}` | {where} | {share:.1f}% |")
    lines += ["", "Plot: `page_cache_cost.png`."]
    (out / "page_cache_cost.md").write_text("\n".join(lines) + "\n")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    xs = range(len(probes))
    for k, state in enumerate(STATES):
        ax1.bar([x + (k - 1) * 0.27 for x in xs], [p[state] for p in probes], width=0.27, label=state)
    ax1.set_xticks(list(xs), [str(i + 1) for i in range(len(probes) - 1)] + ["after"])
    ax1.set_ylabel("CPU ms per MB written")
    ax1.set_yscale("log")
    ax1.set_title("1 MB buffered writes, by the pages' state")
    ax1.legend(fontsize=8)
    labels = [symbol for symbol in SYMBOLS.values()]
    ax2.barh(labels, [b["shares"][s] for s in labels], color="tab:orange")
    ax2.set_xlabel("% of the broker's perf samples (inclusive)")
    ax2.set_title(f"broker under kcat produce, {b['msg_s']:,.0f} msg/s", fontsize=9)
    ax2.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    fig.savefig(out / "page_cache_cost.png", dpi=110)


if __name__ == "__main__":
    raise SystemExit(main())

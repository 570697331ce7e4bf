"""Probe kept with its result (page_cache_probe.txt): one replication-factor-3 topic, MODE RUNS runs of 1,000,000
messages into it, CPU per process per run; SEG=<bytes> sets segment.bytes, SYNC=1 syncs before each run,
SPY=<tag> records perf on the brokers in the first and the last run. Usage: page_cache_probe.py plain 7"""
import sys, os, time, subprocess, tempfile
from pathlib import Path
REPO = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(REPO / "bench"), str(REPO / "tests")]
from confluent_kafka.admin import AdminClient, NewTopic
from cluster_benchmark import produce, roles
from support import Cluster, wait_until
mode = sys.argv[1]; runs = int(sys.argv[2]); seg = os.environ.get("SEG")
confs = {"idem": {"acks": "all", "enable.idempotence": True}, "plain": {"acks": "all"}, "acks1": {"acks": 1}}
rf = 1 if mode == "acks1" else 3
with tempfile.TemporaryDirectory() as tmp:
    c = Cluster(Path(tmp) / "c", 3, zookeeper_session_timeout_ms=6000, auto_leader_rebalance_enable="false")
    try:
        c.start()
        conf = {"min.insync.replicas": "2"} if rf == 3 else {}
        if seg: conf["segment.bytes"] = seg
        adm = AdminClient({"bootstrap.servers": c.bootstrap}); adm.create_topics([NewTopic("t", 1, rf, config=conf)])["t"].result(30)
        wait_until(lambda: len(c.state("t", 0)["isr"]) == rf, 60, what="isr")
        pids = roles(c, "t")
        spy = os.environ.get("SPY")
        for i in range(runs):
            sp = []
            if spy and i in (0, runs - 1):
                for name, pid in pids.items():
                    if name.startswith(("leader", "follower")):
                        sp.append(subprocess.Popen(["perf", "record", "-F", "999", "-g", "-p", str(pid), "-o", f"/tmp/exp/{spy}{i}-{name.replace(' ','-')}.data"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
                time.sleep(1)
            if os.environ.get('SYNC'):
                t0=time.perf_counter(); os.sync(); print('sync', round(time.perf_counter()-t0,2), end=' ')
            r = produce(c.bootstrap, "t", 1_000_000, confs[mode], pids)
            for s in sp: s.send_signal(2); s.wait(30)
            print(mode, i, subprocess.run(["grep", "-E", "^(Dirty|Writeback):", "/proc/meminfo"], capture_output=True, text=True).stdout.split(), round(r["msg_s"]), r.get("max_in_flight"), r.get("rtt_ms_p50"), {k: round(v, 2) for k, v in r["cpu_s"].items() if v > 0.05}, flush=True)
        print(subprocess.run(["sh", "-c", f"ls -la {tmp}/c/*/t-0 | head -30; free -m"], capture_output=True, text=True).stdout)
    finally:
        c.stop()

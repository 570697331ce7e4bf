"""Kept with cprofile_follower_before.txt: a 3-broker cluster whose brokers run under cProfile (cprofile_broker.py),
profiling on SIGUSR1, dumped on SIGUSR2 (to ./profile.<pid>), around one acks=all run of 1,000,000 messages."""
import sys, os, time, tempfile, signal, subprocess
from pathlib import Path
REPO = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(REPO / "bench"), str(REPO / "tests")]
import support
from confluent_kafka.admin import AdminClient
from cluster_benchmark import produce, roles, new_topic
from support import Cluster, wait_for_port
def start(self):
    self.write_config()
    env = dict(os.environ, PYTHONPATH=str(REPO / "platform"), PROF_OUT=str(Path.cwd() / "profile"))
    with open(self.output, "ab") as out:
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("cprofile_broker.py")), "broker", str(self.config_path)],
                                     stdout=out, stderr=subprocess.STDOUT, env=env, cwd=self.workdir)
    wait_for_port(self.host, self.port, proc=self.proc)
    return self
support.BrokerProcess.start = start
with tempfile.TemporaryDirectory() as tmp:
    c = Cluster(Path(tmp) / "c", 3, zookeeper_session_timeout_ms=6000, auto_leader_rebalance_enable="false")
    try:
        c.start()
        adm = AdminClient({"bootstrap.servers": c.bootstrap})
        t = new_topic(c, adm, "t0", 3)
        pids = roles(c, t)
        print(pids)
        for n, p in pids.items():
            if n.startswith(("leader", "follower")): os.kill(p, signal.SIGUSR1)
        time.sleep(0.2)
        r = produce(c.bootstrap, t, 1_000_000, {"acks": "all"}, pids)
        for n, p in pids.items():
            if n.startswith(("leader", "follower")): os.kill(p, signal.SIGUSR2)
        time.sleep(1)
        print(round(r["msg_s"]), {k: round(v, 2) for k, v in r["cpu_s"].items() if v > 0.05})
    finally:
        c.stop()

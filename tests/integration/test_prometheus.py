"""Prometheus and logbus' alert rules (issue 21 item 2): the rules pass ``promtool check rules`` and their unit
tests on synthetic series (``promtool test rules``), and a real Prometheus (``logbus prometheus``, Debian's
binary) scraping three brokers fires LogbusServiceDown and KafkaOfflinePartitions when the broker holding a
single-replica topic is killed with ``kill -9``, and sees the survivors' under-replicated partitions and ISR
shrinks; Alertmanager (issue 21's receiver) gets both alerts and notifies a webhook."""

import os
import subprocess
import sys
import time

import pytest
import requests
from confluent_kafka.admin import AdminClient, NewTopic
from support import REPO, Cluster, free_port, start_with_metrics, terminate, wait_until

from logbus import prometheus

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def test_alert_rules_check_and_their_unit_tests_pass():
    promtool = prometheus.binary("promtool")
    checked = subprocess.run([promtool, "check", "rules", str(prometheus.RULES)], capture_output=True, text=True,
                             timeout=60)
    assert checked.returncode == 0 and "SUCCESS: 6 rules found" in checked.stdout, checked.stdout + checked.stderr
    tested = subprocess.run([promtool, "test", "rules", "alerts_test.yml"], cwd=prometheus.RULES.parent,
                            capture_output=True, text=True, timeout=60)
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr


@pytest.fixture()
def cluster(tmp_path):
    c = Cluster(tmp_path / "cluster", size=3)
    try:
        yield start_with_metrics(c)
    finally:
        c.stop()


HTTP = requests.Session()
HTTP.trust_env = False  # loopback, never through a proxy


def ready(url: str) -> bool:
    try:
        return HTTP.get(f"{url}/-/ready", timeout=2).status_code == 200
    except requests.ConnectionError:
        return False


def firing(url: str) -> dict[str, list[dict]]:
    alerts = HTTP.get(f"{url}/api/v1/alerts", timeout=5).json()["data"]["alerts"]
    out: dict[str, list[dict]] = {}
    for a in alerts:
        if a["state"] == "firing":
            out.setdefault(a["labels"]["alertname"], []).append(a["labels"])
    return out


def value(url: str, expr: str) -> float:
    result = HTTP.get(f"{url}/api/v1/query", params={"query": expr}, timeout=5).json()["data"]["result"]
    return float(result[0]["value"][1]) if result else 0.0


class Webhook:
    """An HTTP receiver of Alertmanager's webhook notifications (its JSON payloads, in arrival order)."""

    def __init__(self):
        import json
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        received = self.received = []

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(200)
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/alerts"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_killed_broker_fires_service_down_and_offline_partitions(cluster, tmp_path):
    """... and Alertmanager (``logbus alertmanager``, Debian's binary, logbus' configuration) receives them from
    Prometheus and notifies the operators' webhook, grouped by alert and datacenter."""
    from logbus import alertmanager

    port, manager_port = free_port(), free_port()
    hook = Webhook()
    (tmp_path / "alertmanager.yml").write_text(alertmanager.config([hook.url]))
    config = tmp_path / "prometheus.yml"
    config.write_text(prometheus.config(
        {"broker": [(f"127.0.0.1:{b.metrics_port}", {"datacenter": "test"}) for b in cluster.brokers.values()]},
        [str(prometheus.RULES)], interval="1s", alertmanagers=[f"127.0.0.1:{manager_port}"]))
    env = dict(os.environ, PYTHONPATH=str(REPO / "platform"))
    manager = subprocess.Popen([sys.executable, "-m", "logbus.cli", "alertmanager", "--config",
                                str(tmp_path / "alertmanager.yml"), "--data-dir", str(tmp_path / "am"), "--listen",
                                f"127.0.0.1:{manager_port}"], env=env, stdout=subprocess.DEVNULL,
                               stderr=open(tmp_path / "alertmanager.log", "w"))
    proc = subprocess.Popen([sys.executable, "-m", "logbus.cli", "prometheus", "--config", str(config), "--data-dir",
                             str(tmp_path / "tsdb"), "--listen", f"127.0.0.1:{port}"], env=env,
                            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "prometheus.log", "w"))
    url, manager_url = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{manager_port}"
    try:
        wait_until(lambda: ready(url) or proc.poll() is not None, 30, interval=0.5, what="Prometheus ready")
        assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()
        wait_until(lambda: ready(manager_url) or manager.poll() is not None, 30, interval=0.5,
                   what="Alertmanager ready")
        assert manager.poll() is None, (tmp_path / "alertmanager.log").read_text()

        def targets_up() -> int:
            active = HTTP.get(f"{url}/api/v1/targets", timeout=5).json()["data"]["activeTargets"]
            return sum(t["health"] == "up" for t in active)

        wait_until(lambda: targets_up() == 3, 30, interval=0.5, what="three brokers scraped")
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        for future in admin.create_topics([NewTopic("single", 1, 1), NewTopic("triple", 3, 3)]).values():
            future.result(30)
        leader = admin.list_topics("single", timeout=10).topics["single"].partitions[0].leader
        assert firing(url) == {}
        victim = cluster.brokers[leader]
        victim.kill9()
        killed = time.monotonic()
        wait_until(lambda: {"LogbusServiceDown", "KafkaOfflinePartitions"} <= set(firing(url)), 60, interval=1,
                   what="both alerts firing")
        alerts = firing(url)
        assert [a["instance"] for a in alerts["LogbusServiceDown"]] == [f"127.0.0.1:{victim.metrics_port}"]
        assert alerts["KafkaOfflinePartitions"][0]["datacenter"] == "test"
        assert "KafkaNoActiveController" not in alerts and time.monotonic() - killed >= 15  # rules' `for:` held
        # the survivors report the replicated topic's partitions under-replicated (the ISRs lost the victim: by
        # the controller when its session ended, or by the leaders after replica.lag.time.max.ms)
        assert wait_until(lambda: value(url, "sum(kafka_server_replicamanager_underreplicatedpartitions)") >= 3,
                          30, interval=1, what="under-replicated partitions seen by Prometheus")
        assert value(url, "sum(kafka_server_replicamanager_isrshrinks_total)") >= 1
        # Prometheus sent them on: Alertmanager holds them, and the webhook got a notification per group
        held = {a["labels"]["alertname"] for a in HTTP.get(f"{manager_url}/api/v2/alerts", timeout=5).json()}
        assert {"LogbusServiceDown", "KafkaOfflinePartitions"} <= held, held

        def notified() -> set[str]:
            return {n["groupLabels"]["alertname"] for n in hook.received if n["status"] == "firing"}

        wait_until(lambda: {"LogbusServiceDown", "KafkaOfflinePartitions"} <= notified(), 40, interval=1,
                   what="the webhook notified of both alerts")
        down = next(n for n in hook.received if n["groupLabels"]["alertname"] == "LogbusServiceDown")
        assert down["version"] == "4" and down["groupLabels"]["datacenter"] == "test"
        assert [a["labels"]["instance"] for a in down["alerts"]] == [f"127.0.0.1:{victim.metrics_port}"]
    finally:
        terminate(proc)
        terminate(manager)
        hook.stop()

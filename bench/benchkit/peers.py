"""The peers of the paper's experiment, from Debian's packages, each run as our own process with its data under
the benchmark's work directory (the system services the packages install are not used), plus their Java
clients (bench/peers/PeerBench.java, compiled here with javac).

Settings, as close to the paper's as each allows:
- RabbitMQ (rabbitmq-server 3.10): durable classic queue, persistent messages (delivery mode 2), published without
  publisher confirms (the paper's async producer), consumed with automatic acknowledgement. RabbitMQ writes
  persistent messages to its message store / queue index and fsyncs in the background: asynchronous flush.
- ActiveMQ (activemq 5.17): KahaDB (the paper's store) with enableJournalDiskSyncs=false (asynchronous flush),
  persistent messages sent with useAsyncSend=true, consumer prefetch 1,000 (queuePrefetch), AUTO_ACKNOWLEDGE.
  JVM heap 1 GiB (the Debian default is 512 MiB), JMX and advisories off.
"""

from __future__ import annotations

import abc
import os
import shutil
import signal
import subprocess
import sysconfig
from pathlib import Path

from support import free_port, wait_for_port  # tests/support.py

from benchkit.machine import run_client, tree_cpu

BENCH = Path(__file__).resolve().parent.parent
PACKAGES = ["rabbitmq-server", "activemq", "librabbitmq-client-java", "iperf3", "kcat", "default-jdk-headless",
            "libjemalloc2"]
# jemalloc, for kcat runs with another allocator than glibc's (benchkit.logbus_side.JEMALLOC_ENV)
JEMALLOC = f"/usr/lib/{sysconfig.get_config_var('MULTIARCH') or 'x86_64-linux-gnu'}/libjemalloc.so.2"
NEEDED = {"/usr/lib/rabbitmq/bin/rabbitmq-server": "rabbitmq-server",
          "/usr/share/activemq/bin/activemq.jar": "activemq",
          "/usr/share/java/amqp-client.jar": "librabbitmq-client-java",
          "/usr/bin/iperf3": "iperf3", "/usr/bin/kcat": "kcat", "/usr/bin/javac": "default-jdk-headless",
          JEMALLOC: "libjemalloc2"}
CLASSPATH = ["/usr/share/java/amqp-client.jar", "/usr/share/java/slf4j-api.jar", "/usr/share/activemq/lib/*"]


def install() -> None:
    """apt-get install what is missing (as root, or through sudo)."""
    missing = sorted({pkg for path, pkg in NEEDED.items() if not Path(path).exists()})
    if not missing:
        return
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    print(f"installing {' '.join(missing)}", flush=True)
    subprocess.run([*sudo, "apt-get", "install", "-y", "--no-install-recommends", *missing], check=True, env=env,
                   stdout=subprocess.DEVNULL)


def compile_client(work: Path) -> str:
    """javac PeerBench.java into work/classes; return the java classpath."""
    classes = work / "classes"
    classes.mkdir(parents=True, exist_ok=True)
    cp = ":".join(CLASSPATH)
    subprocess.run(["javac", "-nowarn", "-d", str(classes), "-cp", cp, str(BENCH / "peers" / "PeerBench.java")],
                   check=True)
    return f"{classes}:{cp}"


class Peer(abc.ABC):
    name = ""

    def __init__(self, work: Path, classpath: str):
        self.dir = work / self.name
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        self.data = self.dir / "data"
        self.classpath = classpath
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    @abc.abstractmethod
    def pid(self) -> int:
        """The broker process whose tree is measured."""

    def cpu(self) -> float:
        return tree_cpu(self.pid)

    def client(self, *args: object) -> tuple[dict, float]:
        return run_client(["java", "-Xmx1g", "-cp", self.classpath, "PeerBench", self.name, args[0], str(self.port),
                           *map(str, args[1:])])


class RabbitMQ(Peer):
    name = "rabbitmq"

    def start(self) -> "RabbitMQ":
        epmd_port, dist_port = free_port(), free_port()
        (self.dir / "rabbitmq.conf").write_text(f"listeners.tcp.1 = 127.0.0.1:{self.port}\nloopback_users = none\n"
                                                 "vm_memory_high_watermark.relative = 0.4\n")
        (self.dir / "enabled_plugins").write_text("[].\n")
        self.env = dict(os.environ, HOME=str(self.dir), RABBITMQ_MNESIA_BASE=str(self.data),
                        RABBITMQ_LOG_BASE=str(self.dir / "log"), RABBITMQ_NODENAME=f"bench{self.port}@localhost",
                        RABBITMQ_CONFIG_FILE=str(self.dir / "rabbitmq.conf"), RABBITMQ_DIST_PORT=str(dist_port),
                        RABBITMQ_ENABLED_PLUGINS_FILE=str(self.dir / "enabled_plugins"),
                        RABBITMQ_PID_FILE=str(self.dir / "pid"), ERL_EPMD_PORT=str(epmd_port),
                        ERL_EPMD_ADDRESS="127.0.0.1",
                        RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}")
        with open(self.dir / "server.out", "ab") as out:
            self.proc = subprocess.Popen(["/usr/lib/rabbitmq/bin/rabbitmq-server"], env=self.env, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        wait_for_port("127.0.0.1", self.port, timeout=90, proc=self.proc)
        return self

    @property
    def pid(self) -> int:
        return int((self.dir / "pid").read_text().split()[0])

    def stop(self) -> None:
        if self.proc is None:
            return
        try:
            os.kill(self.pid, signal.SIGTERM)  # beam.smp stops the node cleanly on SIGTERM
        except (ProcessLookupError, FileNotFoundError, ValueError):
            pass
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        subprocess.run(["epmd", "-kill"], env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.proc = None


ACTIVEMQ_XML = """<beans xmlns="http://www.springframework.org/schema/beans"
  xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
  xsi:schemaLocation="http://www.springframework.org/schema/beans
  http://www.springframework.org/schema/beans/spring-beans-2.0.xsd
  http://activemq.apache.org/schema/core http://activemq.apache.org/schema/core/activemq-core.xsd">
  <broker xmlns="http://activemq.apache.org/schema/core" useJmx="false" brokerName="bench"
          dataDirectory="{data}" advisorySupport="false">
    <systemUsage><systemUsage>
      <memoryUsage><memoryUsage percentOfJvmHeap="70"/></memoryUsage>
      <storeUsage><storeUsage limit="50 gb"/></storeUsage>
      <tempUsage><tempUsage limit="10 gb"/></tempUsage>
    </systemUsage></systemUsage>
    <persistenceAdapter><kahaDB directory="{data}/kahadb" enableJournalDiskSyncs="false"/></persistenceAdapter>
    <transportConnectors><transportConnector name="openwire" uri="tcp://127.0.0.1:{port}"/></transportConnectors>
  </broker>
</beans>
"""


class ActiveMQ(Peer):
    name = "activemq"

    def start(self) -> "ActiveMQ":
        config = self.dir / "activemq.xml"
        config.write_text(ACTIVEMQ_XML.format(data=self.data, port=self.port))
        cmd = ["java", "-Xms1G", "-Xmx1G", f"-Dactivemq.base={self.dir}", "-Dactivemq.home=/usr/share/activemq",
               f"-Dactivemq.conf={self.dir}", f"-Dactivemq.data={self.data}",
               "-jar", "/usr/share/activemq/bin/activemq.jar", "start", f"xbean:file:{config}"]
        with open(self.dir / "server.out", "ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        wait_for_port("127.0.0.1", self.port, timeout=90, proc=self.proc)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


"""``logbus zookeeper``: a real ZooKeeper (Debian's ``zookeeper`` package, 3.8) in the foreground, standalone,
with its data under ``--data-dir``. The process execs java, so its pid is ZooKeeper's and SIGTERM stops it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

JAR = "/usr/share/java/zookeeper.jar"
CONF_DIR = "/etc/zookeeper/conf"


class ZooKeeperMissing(OSError):
    pass


def write_config(data_dir: Path, host: str, port: int, tick_time_ms: int) -> Path:
    data_dir.mkdir(parents=True, exist_ok=True)
    config = data_dir / "zoo.cfg"
    config.write_text(
        f"tickTime={tick_time_ms}\n"
        f"dataDir={data_dir / 'data'}\n"
        f"clientPort={port}\n"
        f"clientPortAddress={host}\n"
        "maxClientCnxns=0\n"
        "admin.enableServer=false\n"  # no Jetty admin server on port 8080
        "4lw.commands.whitelist=ruok,stat,srvr,mntr\n"
        "autopurge.snapRetainCount=3\n"
        "autopurge.purgeInterval=1\n")
    return config


def command(config: Path, data_dir: Path) -> list[str]:
    java = shutil.which("java")
    if java is None or not os.path.exists(JAR):
        raise ZooKeeperMissing("ZooKeeper is not installed: run `bash scripts/setup` (Debian packages zookeeper "
                               "and default-jre-headless)")
    return [java, "-Xmx256m", f"-Dzookeeper.log.dir={data_dir}", "-Dzookeeper.root.logger=INFO,CONSOLE",
            "-cp", f"{CONF_DIR}:{JAR}", "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(config)]


def run(data_dir: str, host: str, port: int, tick_time_ms: int) -> int:
    directory = Path(data_dir).resolve()
    config = write_config(directory, host, port, tick_time_ms)
    argv = command(config, directory)
    print(f"logbus: ZooKeeper on {host}:{port}, data in {directory}", flush=True)
    os.execv(argv[0], argv)
    return 1  # not reached

"""``logbus spark-master`` and ``logbus spark-worker``: a Spark standalone cluster's two daemons, Spark's own
``org.apache.spark.deploy.master.Master`` and ``...deploy.worker.Worker`` from the Spark that pyspark ships
(pyspark's package directory is SPARK_HOME; its ``bin/spark-class``), in the foreground until SIGTERM.

The verb execs ``spark-class``, which execs java: the process's pid is the JVM's, SIGTERM reaches the JVM (Spark
stops the daemon; a worker kills its executors) and the exit code is the JVM's — nothing is left behind by a
``kill -9`` of a wrapper, because there is none. Logs go to stdout/stderr (Spark's console log4j profile), not to
files: no ``sbin/start-*.sh``, which fork into the background.

- master: RPC on ``--host``:``--port`` (workers and drivers connect to ``spark://host:port``), the web UI on
  ``--webui-port`` (``/json/`` for :func:`master_status`; each application's UI linked from it), bound to
  ``--host`` too (SPARK_LOCAL_IP). Spark 4's REST submission server (6066 by default) only with ``--rest-port``,
  so that several masters on one machine do not fight over 6066. ``--work-dir``: its configuration
  (``spark-master.conf``) and temporary files.
- worker: registers with ``--master`` (a comma list for a standby master: ``spark://h1:7077,h2:7077``), offers
  ``--cores`` and ``--memory`` to applications; executors run under ``--work-dir`` (per application: their jars,
  the pyFiles zip, stdout/stderr; scratch space under ``local/``), with the venv's Python for their Python
  workers (PYSPARK_PYTHON, this interpreter unless set). Application directories older than a day are removed.

Health: :func:`master_status` reads the master's ``/json/``; :func:`alive_workers` and :func:`wait_for_workers`
count the workers that registered and are ALIVE.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
MASTER_URL = re.compile(r"spark://[^\s:/,]+:\d{1,5}(,[^\s:/,]+:\d{1,5})*")
MEMORY = re.compile(r"([1-9][0-9]*)([mMgGtT]?)")  # the worker's --memory: MiB, or with a unit (512m, 1g)
APP_DATA_TTL_S = 24 * 3600


class SparkClusterError(ValueError):
    """Bad arguments: one line for the operator (the CLI exits with 2)."""


class SparkMissing(OSError):
    pass


def spark_home() -> Path:
    """pyspark's package directory: the Spark distribution pip installs (``bin/spark-class``, ``jars/``)."""
    try:
        import pyspark
    except ImportError:
        raise SparkMissing("pyspark is not installed: run `bash scripts/setup` (the loads' Python packages)") from None
    home = Path(pyspark.__file__).resolve().parent
    if not os.access(home / "bin" / "spark-class", os.X_OK):
        raise SparkMissing(f"{home / 'bin' / 'spark-class'} is missing or not executable")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise SparkMissing("no Java runtime: run `bash scripts/setup` (Debian's default-jre-headless)")
    return home


def _host(host: str) -> str:
    if not host or any(c.isspace() or c in "/:,[]" for c in host):
        raise SparkClusterError(f"--host must be a host name or IPv4 address, not {host!r}")
    return host


def _number(value: int | str, what: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise SparkClusterError(f"{what} must be a number, not {value!r}") from None


def _port(value: int | str, what: str, low: int = 1) -> int:
    value = _number(value, what)
    if not low <= value <= 65535:
        raise SparkClusterError(f"{what} must be from {low} to 65535, not {value}")
    return value


def _work_dir(path: str) -> Path:
    directory = Path(path).resolve()
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SparkClusterError(f"--work-dir {path}: {exc.strerror}") from None
    if not os.access(directory, os.W_OK):
        raise SparkClusterError(f"--work-dir {path} is not writable")
    return directory


def memory_mb(text: str) -> int:
    """The worker's ``--memory`` in MiB (``1g`` → 1024, ``512m`` or ``512`` → 512)."""
    match = MEMORY.fullmatch(text.strip())
    if not match:
        raise SparkClusterError(f"--memory must be like 1g or 512m, not {text!r}")
    unit = match.group(2).lower()
    return int(match.group(1)) * {"": 1, "m": 1, "g": 1024, "t": 1024 * 1024}[unit]


def _properties(path: Path, values: dict[str, str]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return path


def _environment(home: Path, host: str, work_dir: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"SPARK_HOME": str(home), "SPARK_LOCAL_IP": host, "SPARK_PUBLIC_DNS": host, **extra})
    if "SPARK_CONF_DIR" not in env:  # an empty one: no spark-env.sh or log4j2 config picked up by accident
        env["SPARK_CONF_DIR"] = str(work_dir / "conf")
        (work_dir / "conf").mkdir(exist_ok=True)
    tmp = work_dir / "tmp"
    tmp.mkdir(exist_ok=True)
    opts = env.get("SPARK_DAEMON_JAVA_OPTS", "")
    env["SPARK_DAEMON_JAVA_OPTS"] = f"{opts} -Djava.io.tmpdir={tmp}".strip()
    return env


def master_command(host: str, port: int | str, webui_port: int | str, work_dir: str,
                   rest_port: int | str | None = None) -> tuple[list[str], dict[str, str]]:
    """(argv, environment) of the master; raises SparkClusterError on bad arguments."""
    host = _host(host)
    port = _port(port, "--port")
    webui_port = _port(webui_port, "--webui-port")
    if rest_port is not None:
        rest_port = _port(rest_port, "--rest-port")
    if len({port, webui_port, rest_port} - {None}) != 2 + (rest_port is not None):
        raise SparkClusterError("--port, --webui-port and --rest-port must differ")
    directory = _work_dir(work_dir)
    home = spark_home()
    conf = {"spark.master.rest.enabled": "true" if rest_port is not None else "false"}
    if rest_port is not None:
        conf.update({"spark.master.rest.host": host, "spark.master.rest.port": str(rest_port)})
    props = _properties(directory / "spark-master.conf", conf)
    argv = [str(home / "bin" / "spark-class"), MASTER_CLASS, "--host", host, "--port", str(port),
            "--webui-port", str(webui_port), "--properties-file", str(props)]
    return argv, _environment(home, host, directory)


def worker_command(master: str, host: str, webui_port: int | str, cores: int | str, memory: str, work_dir: str,
                   port: int | str | None = None) -> tuple[list[str], dict[str, str]]:
    """(argv, environment) of a worker; raises SparkClusterError on bad arguments."""
    if not MASTER_URL.fullmatch(master.strip()):
        raise SparkClusterError(f"--master must be spark://HOST:PORT[,HOST:PORT...], not {master!r}")
    host = _host(host)
    webui_port = _port(webui_port, "--webui-port", low=0)
    if port is not None:
        port = _port(port, "--port", low=0)
    cores = _number(cores, "--cores")
    if cores < 1:
        raise SparkClusterError(f"--cores must be at least 1, not {cores}")
    mb = memory_mb(memory)
    directory = _work_dir(work_dir)
    home = spark_home()
    props = _properties(directory / "spark-worker.conf", {
        "spark.worker.cleanup.enabled": "true",  # finished applications' directories, after a day
        "spark.worker.cleanup.appDataTtl": str(APP_DATA_TTL_S)})
    (directory / "local").mkdir(exist_ok=True)
    argv = [str(home / "bin" / "spark-class"), WORKER_CLASS, "--host", host, "--webui-port", str(webui_port),
            "--cores", str(cores), "--memory", f"{mb}m", "--work-dir", str(directory),
            "--properties-file", str(props)]
    if port is not None:
        argv += ["--port", str(port)]
    argv.append(master.strip())
    env = _environment(home, host, directory, SPARK_LOCAL_DIRS=str(directory / "local"),
                       PYSPARK_PYTHON=os.environ.get("PYSPARK_PYTHON") or sys.executable)
    return argv, env


def run(argv: list[str], env: dict[str, str], say: str) -> int:
    print(f"logbus: {say}", flush=True)
    os.execve(argv[0], argv, env)
    return 1  # not reached


def master_status(host: str, webui_port: int, timeout: float = 3.0) -> dict | None:
    """The master's ``/json/`` (``status`` ALIVE/STANDBY/RECOVERING, ``workers`` with ``state``, ``cores``,
    ``memory``, ``aliveworkers``, ``activeapps``...), or None while it does not answer."""
    try:
        with urllib.request.urlopen(f"http://{host}:{webui_port}/json/", timeout=timeout) as response:
            return json.loads(response.read())
    except (OSError, urllib.error.URLError, ValueError):
        return None


def alive_workers(status: dict | None) -> list[dict]:
    """The ALIVE workers of a :func:`master_status` answer (a restarted worker's earlier, dead entry excluded)."""
    if not status or status.get("status") != "ALIVE":
        return []
    return [w for w in status.get("workers", []) if w.get("state") == "ALIVE"]


def wait_for_workers(host: str, webui_port: int, count: int, timeout: float = 60.0) -> dict:
    """Wait until the master is ALIVE with at least ``count`` alive workers; its status. TimeoutError else."""
    deadline = time.monotonic() + timeout
    while True:
        status = master_status(host, webui_port)
        if len(alive_workers(status)) >= count:
            return status
        if time.monotonic() > deadline:
            got = len(alive_workers(status)) if status else "no answer"
            raise TimeoutError(f"Spark master {host}:{webui_port}: {count} alive workers not reached within "
                               f"{timeout}s ({got})")
        time.sleep(0.25)


def _master(args) -> int:
    try:
        argv, env = master_command(args.host, args.port, args.webui_port, args.work_dir, args.rest_port)
    except SparkClusterError as exc:
        print(f"logbus: spark-master: {exc}", file=sys.stderr)
        return 2
    return run(argv, env, f"Spark master at spark://{args.host}:{args.port}, web UI "
                          f"http://{args.host}:{args.webui_port}/, work dir {Path(args.work_dir).resolve()}")


def _worker(args) -> int:
    try:
        argv, env = worker_command(args.master, args.host, args.webui_port, args.cores, args.memory, args.work_dir,
                                   args.port)
    except SparkClusterError as exc:
        print(f"logbus: spark-worker: {exc}", file=sys.stderr)
        return 2
    return run(argv, env, f"Spark worker of {args.master} on {args.host} ({args.cores} cores, {args.memory}), "
                          f"web UI port {args.webui_port}, work dir {Path(args.work_dir).resolve()}")


def add_parsers(verbs) -> None:
    """Register ``spark-master`` and ``spark-worker``."""
    master = verbs.add_parser("spark-master", help="run a Spark standalone master (Spark's own, from pyspark) in "
                                                   "the foreground until SIGTERM")
    master.add_argument("--host", default="127.0.0.1", help="address to bind and advertise (default 127.0.0.1)")
    master.add_argument("--port", default=7077, help="RPC port: spark://HOST:PORT (7077)")
    master.add_argument("--webui-port", default=8080, help="web UI and /json/ (8080)")
    master.add_argument("--rest-port", help="enable the REST submission server on this port "
                                                                 "(default: off)")
    master.add_argument("--work-dir", required=True, help="the master's configuration and temporary files")
    master.set_defaults(func=_master)

    worker = verbs.add_parser("spark-worker", help="run a Spark standalone worker (Spark's own, from pyspark) in "
                                                   "the foreground until SIGTERM")
    worker.add_argument("--master", required=True, help="spark://HOST:PORT of the master (comma list: standbys)")
    worker.add_argument("--host", default="127.0.0.1", help="address to bind and advertise (default 127.0.0.1)")
    worker.add_argument("--port", help="RPC port (default: any free one)")
    worker.add_argument("--webui-port", default=8081, help="web UI port (8081; 0: any)")
    worker.add_argument("--cores", default=1, help="cores offered to executors (default 1)")
    worker.add_argument("--memory", default="1g", help="memory offered to executors, like 1g or 512m (default 1g)")
    worker.add_argument("--work-dir", required=True, help="executors' directories (jars, pyFiles, logs, scratch)")
    worker.set_defaults(func=_worker)

"""``logbus spark-master`` / ``spark-worker`` without starting Spark: the command and environment each verb execs,
one-line errors for bad arguments, and the health helpers' reading of the master's /json/."""

import socket
import sys
from pathlib import Path

import pytest

from logbus import cli, spark_cluster
from logbus.spark_cluster import SparkClusterError, alive_workers, master_command, memory_mb, worker_command

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


def test_the_master_runs_sparks_own_master_class_bound_to_the_host(tmp_path):
    argv, env = master_command("127.0.0.1", 7077, 8080, str(tmp_path / "m"))
    home = spark_cluster.spark_home()
    assert argv[:2] == [str(home / "bin" / "spark-class"), "org.apache.spark.deploy.master.Master"]
    assert argv[2:8] == ["--host", "127.0.0.1", "--port", "7077", "--webui-port", "8080"]
    assert env["SPARK_HOME"] == str(home) and env["SPARK_LOCAL_IP"] == "127.0.0.1"
    props = Path(argv[argv.index("--properties-file") + 1])
    assert props.parent == tmp_path / "m" and "spark.master.rest.enabled=false" in props.read_text()
    assert f"-Djava.io.tmpdir={tmp_path / 'm' / 'tmp'}" in env["SPARK_DAEMON_JAVA_OPTS"]


def test_the_rest_submission_server_only_on_request(tmp_path):
    argv, _ = master_command("127.0.0.1", 7077, 8080, str(tmp_path), rest_port=6066)
    text = Path(argv[argv.index("--properties-file") + 1]).read_text()
    assert "spark.master.rest.enabled=true" in text and "spark.master.rest.port=6066" in text
    assert "spark.master.rest.host=127.0.0.1" in text


def test_the_worker_offers_its_cores_and_memory_with_the_venvs_python(tmp_path, monkeypatch):
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    argv, env = worker_command("spark://127.0.0.1:7077", "127.0.0.1", 8081, 2, "1g", str(tmp_path / "w"))
    assert argv[1] == "org.apache.spark.deploy.worker.Worker" and argv[-1] == "spark://127.0.0.1:7077"
    assert argv[argv.index("--cores") + 1] == "2" and argv[argv.index("--memory") + 1] == "1024m"
    assert argv[argv.index("--work-dir") + 1] == str(tmp_path / "w") and "--port" not in argv
    assert env["PYSPARK_PYTHON"] == sys.executable and env["SPARK_LOCAL_DIRS"] == str(tmp_path / "w" / "local")
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/python3")
    argv, env = worker_command("spark://a:7077,b:7077", "127.0.0.1", 0, 1, "512m", str(tmp_path / "w"), port=7078)
    assert env["PYSPARK_PYTHON"] == "/opt/python3" and argv[argv.index("--port") + 1] == "7078"


@pytest.mark.parametrize("memory,mb", [("1g", 1024), ("512m", 512), ("512", 512), ("2G", 2048), ("1t", 1048576)])
def test_memory_sizes(memory, mb):
    assert memory_mb(memory) == mb


@pytest.mark.parametrize("call,message", [
    (lambda d: master_command("127.0.0.1", 0, 8080, d), "--port must be from 1 to 65535, not 0"),
    (lambda d: master_command("127.0.0.1", "x", 8080, d), "--port must be a number, not 'x'"),
    (lambda d: master_command("127.0.0.1", 7077, 7077, d), "must differ"),
    (lambda d: master_command("spark://h", 7077, 8080, d), "--host must be a host name"),
    (lambda d: worker_command("http://h:7077", "127.0.0.1", 8081, 1, "1g", d), "--master must be spark://"),
    (lambda d: worker_command("spark://h:7077", "127.0.0.1", 8081, 0, "1g", d), "--cores must be at least 1"),
    (lambda d: worker_command("spark://h:7077", "127.0.0.1", 8081, 1, "lots", d), "--memory must be like 1g"),
    (lambda d: worker_command("spark://h:7077", "127.0.0.1", 70000, 1, "1g", d), "--webui-port must be from 0"),
])
def test_bad_arguments_are_refused(tmp_path, call, message):
    with pytest.raises(SparkClusterError, match=message.replace("(", r"\(").replace("+", r"\+")):
        call(str(tmp_path))


def test_the_verbs_report_bad_arguments_in_one_line_and_exit_2(tmp_path, capsys):
    assert cli.main(["spark-worker", "--master", "localhost:7077", "--work-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("logbus: spark-worker: --master must be spark://HOST:PORT")
    assert cli.main(["spark-master", "--port", "99999", "--work-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err == "logbus: spark-master: --port must be from 1 to 65535, not 99999\n"
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert cli.main(["spark-master", "--work-dir", str(blocker / "sub")]) == 2
    assert capsys.readouterr().err.startswith(f"logbus: spark-master: --work-dir {blocker / 'sub'}: ")


def test_alive_workers_counts_alive_ones_of_an_alive_master():
    status = {"status": "ALIVE", "workers": [{"id": "w1", "state": "ALIVE", "cores": 1},
                                             {"id": "w0", "state": "DEAD", "cores": 1},
                                             {"id": "w2", "state": "ALIVE", "cores": 2}]}
    assert [w["id"] for w in alive_workers(status)] == ["w1", "w2"]
    assert alive_workers({**status, "status": "RECOVERING"}) == [] and alive_workers(None) == []


def test_master_status_is_none_while_nothing_answers():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connection refused
        assert spark_cluster.master_status("127.0.0.1", port, timeout=1) is None
    with pytest.raises(TimeoutError, match="2 alive workers not reached"):
        spark_cluster.wait_for_workers("127.0.0.1", port, 2, timeout=0.3)

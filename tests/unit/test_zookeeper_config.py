"""``logbus zookeeper``'s zoo.cfg: standalone exactly as before, ensemble options in ZooKeeper's own terms, bad
ensemble arguments refused in one line with exit code 2 (before any java starts)."""

import pytest
from logbus.cli import main
from logbus.zookeeper import EnsembleError, Server, ensemble, parse_server, write_config

pytestmark = [pytest.mark.unit, pytest.mark.timeout(10)]

SERVERS = "1=127.0.0.1:2888:3888;127.0.0.1:2181,2=127.0.0.2:2888:3888;127.0.0.2:2181,3=127.0.0.3:2888:3888"


def test_standalone_config_is_unchanged(tmp_path):
    assert ensemble(None, None, None, None, "127.0.0.1", 2181) is None
    config = write_config(tmp_path, "127.0.0.1", 2181, 2000)
    assert config.read_text() == (
        f"tickTime=2000\ndataDir={tmp_path / 'data'}\nclientPort=2181\nclientPortAddress=127.0.0.1\n"
        "maxClientCnxns=0\nadmin.enableServer=false\n4lw.commands.whitelist=ruok,stat,srvr,mntr\n"
        "autopurge.snapRetainCount=3\nautopurge.purgeInterval=1\n")
    assert not (tmp_path / "data" / "myid").exists()


def test_ensemble_config_and_myid(tmp_path):
    quorum = ensemble("2", [SERVERS], "8", None, "127.0.0.2", 2181)
    assert quorum.server_id == 2 and (quorum.init_limit, quorum.sync_limit) == (8, 5)
    text = write_config(tmp_path, "127.0.0.2", 2181, 250, quorum).read_text()
    lines = text.splitlines()
    assert lines[:4] == ["tickTime=250", f"dataDir={tmp_path / 'data'}", "clientPort=2181",
                         "clientPortAddress=127.0.0.2"]
    assert lines[-6:] == ["initLimit=8", "syncLimit=5", "standaloneEnabled=false",
                          "server.1=127.0.0.1:2888:3888;127.0.0.1:2181", "server.2=127.0.0.2:2888:3888;127.0.0.2:2181",
                          "server.3=127.0.0.3:2888:3888"]
    assert (tmp_path / "data" / "myid").read_text() == "2\n"
    write_config(tmp_path, "127.0.0.2", 2181, 250, quorum)  # a restart: same myid, accepted


def test_own_client_address_comes_from_host_and_port():
    quorum = ensemble("3", ["1=a:1:2", "2=b:1:2", "3=c:1:2"], None, None, "10.0.0.3", 2182)
    assert quorum.servers[2] == Server(3, "c", 1, 2, "10.0.0.3", 2182)
    assert quorum.servers[0].client_port is None
    assert parse_server("4=h:5:6;7") == Server(4, "h", 5, 6, "0.0.0.0", 7)  # ZooKeeper's default address


@pytest.mark.parametrize("args, message", [
    (["--server-id", "1"], "an ensemble needs --server"),
    (["--server", SERVERS], "an ensemble needs --server-id"),
    (["--init-limit", "5"], "an ensemble needs --server-id"),
    (["--server-id", "x", "--server", SERVERS], "--server-id must be a number from 1 to 255, not 'x'"),
    (["--server-id", "256", "--server", SERVERS], "--server-id must be from 1 to 255, not 256"),
    (["--server-id", "4", "--server", SERVERS], "--server-id 4 is not among the --server ids [1, 2, 3]"),
    (["--server-id", "1", "--server", "1=127.0.0.1:2888"], "expected ID=HOST:QUORUM_PORT:ELECTION_PORT"),
    (["--server-id", "1", "--server", "127.0.0.1:2888:3888"], "expected ID=HOST:QUORUM_PORT:ELECTION_PORT"),
    (["--server-id", "1", "--server", "1=127.0.0.1:2888:99999"], "election port in --server"),
    (["--server-id", "1", "--server", "0=127.0.0.1:2888:3888"], "server id in --server"),
    (["--server-id", "1", "--server", "1=:2888:3888"], "bad host ''"),
    (["--server-id", "1", "--server", "1=127.0.0.1:2888:3888", "--server", "1=127.0.0.2:2888:3888"],
     "server id 1 given twice"),
    (["--server-id", "1", "--server", "1=127.0.0.1:2888:3888,2=127.0.0.1:2888:3889"],
     "127.0.0.1:2888 is both the quorum address of server 1 and the quorum address of server 2"),
    (["--server-id", "1", "--server", "1=127.0.0.1:2888:2888"], "is both the quorum address of server 1 and the "
                                                               "election address of server 1"),
    (["--server-id", "1", "--server", "1=127.0.0.1:2888:3888;127.0.0.1:2200"],
     "gives client address 127.0.0.1:2200 but --host/--port say 127.0.0.1:2181"),
    (["--server-id", "1", "--server", SERVERS, "--sync-limit", "0"], "--sync-limit must be from 1 to 10000"),
])
def test_bad_ensemble_arguments_are_one_line_and_exit_2(tmp_path, capsys, args, message):
    assert main(["zookeeper", "--data-dir", str(tmp_path / "zk"), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("logbus: zookeeper: ") and message in err, err
    assert not (tmp_path / "zk").exists()  # refused before writing anything


def test_data_of_another_server_is_refused(tmp_path, capsys):
    (tmp_path / "zk" / "data").mkdir(parents=True)
    (tmp_path / "zk" / "data" / "myid").write_text("3\n")
    assert main(["zookeeper", "--data-dir", str(tmp_path / "zk"), "--server-id", "1", "--server", SERVERS]) == 2
    assert "belongs to server 3, not --server-id 1" in capsys.readouterr().err
    with pytest.raises(EnsembleError):
        write_config(tmp_path / "zk", "127.0.0.1", 2181, 2000, ensemble("2", [SERVERS], None, None, "127.0.0.2",
                                                                          2181))

"""``logbus acls --authorizer-properties zookeeper.connect=...`` against a real ZooKeeper: add (with --producer
and --consumer conveniences), list, remove --force, a no-tty remove without --force refused in one line, and
--bootstrap-server to no broker failing in one line (through a broker: tests/integration/test_acls.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from support import REPO, ZooKeeperProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def acls(*argv, zk):
    env = dict(os.environ, PYTHONPATH=str(REPO / "platform"))
    return subprocess.run([sys.executable, "-m", "logbus.cli", "acls", "--authorizer-properties",
                           f"zookeeper.connect={zk}", *argv], capture_output=True, text=True, env=env,
                          stdin=subprocess.DEVNULL, timeout=30)


def test_add_list_remove(tmp_path):
    zk_proc = ZooKeeperProcess(tmp_path / "zk").start()
    zk = zk_proc.connect + "/logbus"
    try:
        out = acls("--add", "--allow-principal", "User:alice", "--consumer", "--topic", "orders", "--group", "app",
                   zk=zk)
        assert out.returncode == 0, out.stderr
        out = acls("--add", "--deny-principal", "User:bob", "--operation", "write", "--topic", "pay",
                   "--resource-pattern-type", "prefixed", zk=zk)
        assert out.returncode == 0, out.stderr
        listed = acls("--list", zk=zk)
        assert listed.returncode == 0, listed.stderr
        assert "name=orders" in listed.stdout and "operation=Read" in listed.stdout
        assert "patternType=PREFIXED" in listed.stdout and "permissionType=Deny" in listed.stdout
        from kazoo.client import KazooClient
        client = KazooClient(hosts=zk)
        client.start(timeout=15)
        try:
            body = json.loads(client.get("/kafka-acl/Group/app")[0])
            assert body["acls"] == [{"principal": "User:alice", "permissionType": "Allow", "operation": "Read",
                                     "host": "*"}]
        finally:
            client.stop()
            client.close()
        refused = acls("--remove", "--topic", "orders", zk=zk)
        assert refused.returncode != 0 and len(refused.stderr.strip().splitlines()) == 1
        removed = acls("--remove", "--force", "--topic", "orders", zk=zk)
        assert removed.returncode == 0, removed.stderr
        after = acls("--list", zk=zk).stdout
        assert "name=orders" not in after and "name=app" in after
        env = dict(os.environ, PYTHONPATH=str(REPO / "platform"))
        boot = subprocess.run([sys.executable, "-m", "logbus.cli", "acls", "--bootstrap-server", "127.0.0.1:1",
                               "--list"], capture_output=True, text=True, env=env, timeout=60)
        assert boot.returncode != 0 and len(boot.stderr.strip().splitlines()) == 1
    finally:
        zk_proc.stop()


def test_old_change_notifications_are_deleted(tmp_path):
    """Each ACL change leaves a sequential notification; those older than Kafka's 15 minutes are deleted when
    changes are read (brokers call purge_changes after each reload), the recent ones stay."""
    from kazoo.client import KazooClient
    from broker.security.acl_zk_store import AclZkStore

    zk_proc = ZooKeeperProcess(tmp_path / "zk").start()
    zk = zk_proc.connect + "/logbus"
    try:
        for topic in ("a", "b"):
            out = acls("--add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", topic, zk=zk)
            assert out.returncode == 0, out.stderr
        out = acls("--add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "p",
                   "--resource-pattern-type", "prefixed", zk=zk)
        assert out.returncode == 0, out.stderr
        client = KazooClient(hosts=zk)
        client.start(timeout=15)
        try:
            store = AclZkStore(client)
            assert len(client.get_children("/kafka-acl-changes")) == 2
            assert len(client.get_children("/kafka-acl-extended-changes")) == 1
            assert store.purge_changes() == 0  # all younger than 15 minutes
            later = int(time.time() * 1000) + 15 * 60 * 1000 + 1000  # as seen 15 minutes from now
            assert store.purge_changes(now_ms=later) == 3
            assert client.get_children("/kafka-acl-changes") == []
            assert client.get_children("/kafka-acl-extended-changes") == []
            assert len(store.load()) == 3  # the ACLs themselves stay
        finally:
            client.stop()
            client.close()
    finally:
        zk_proc.stop()

"""ACLs in a real ZooKeeper (broker.security.acl_zk_store): Kafka's znodes and JSON, change notifications that
wake a watcher, removal deleting an emptied resource znode."""

from __future__ import annotations

import json
import sys
import threading

import pytest

from support import REPO, ZooKeeperProcess

sys.path.insert(0, str(REPO / "platform"))
from kazoo.client import KazooClient  # noqa: E402

from broker.security.acl_zk_store import AclZkStore  # noqa: E402
from broker.security.authorizer import Acl  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def test_add_watch_remove(tmp_path):
    zk_proc = ZooKeeperProcess(tmp_path / "zk").start()
    zk = KazooClient(hosts=zk_proc.connect)
    try:
        zk.start(timeout=15)
        store = AclZkStore(zk)
        changed = threading.Event()
        store.watch(changed.set)
        changed.clear()
        read = Acl("Topic", "orders", "Literal", "User:alice", "*", "Read", "Allow")
        pre = Acl("Group", "app-", "Prefixed", "User:alice", "*", "Read", "Allow")
        store.add([read, pre])
        assert changed.wait(10)
        data, _ = zk.get("/kafka-acl/Topic/orders")
        assert json.loads(data) == {"version": 1, "acls": [
            {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}]}
        assert zk.exists("/kafka-acl-extended/prefixed/Group/app-")
        assert zk.get_children("/kafka-acl-changes") and zk.get_children("/kafka-acl-extended-changes")
        assert AclZkStore(zk).load() == {read, pre}
        store.remove([read])
        assert zk.exists("/kafka-acl/Topic/orders") is None
        assert store.load() == {pre}
    finally:
        zk.stop()
        zk.close()
        zk_proc.stop()

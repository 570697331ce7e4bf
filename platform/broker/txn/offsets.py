"""Consumer offsets committed inside a transaction (TxnOffsetCommit, KIP-98; member checks of KIP-447).

The group's coordinator checks the commit like an OffsetCommit (member, generation, static instance) and keeps
the offsets *pending* for the producer id, durably: ZooKeeper ``/consumers/<group>/pending-offsets/<producerId>``
(cluster mode) or ``transactional-offsets.json`` in the first log dir (standalone). The transaction's end reaches
the group's coordinator as a marker for the pseudo-partition ``__consumer_offsets:<group>``/0 (WriteTxnMarkers,
or the local fast path): commit moves the pending offsets into the offset registry — in ZooKeeper one multi-op
(check the pending node, set every offset, delete the pending node), so a coordinator killed half-way leaves
either all or nothing —, abort drops them. While offsets are pending, OffsetFetch with ``require_stable``
answers UNSTABLE_OFFSET_COMMIT for their partitions, as Kafka does.
"""

from __future__ import annotations

import asyncio
import json
import os

from kazoo.exceptions import NodeExistsError, NoNodeError

from broker.cluster.znodes import node_name
from broker.log.storage_errors import replace_file
from broker.protocol.messages import ErrorCode

CONSUMERS = "/consumers"
Offsets = dict[tuple[str, int], tuple[int, str]]


class FilePending:
    """Standalone: {group: {producer id: {"epoch": e, "offsets": [[topic, partition, offset, metadata]]}}}."""

    def __init__(self, log_dir: str):
        self.path = os.path.join(log_dir, "transactional-offsets.json")
        self.data: dict[str, dict[str, dict]] = {}
        self._lock = asyncio.Lock()
        try:
            with open(self.path) as f:
                self.data = json.load(f)
        except FileNotFoundError:
            pass
        except ValueError:  # torn: written with fsync and replaced whole, so only by an outside hand
            self.data = {}

    async def _save(self, data) -> None:
        await asyncio.to_thread(replace_file, self.path, json.dumps(data))
        self.data = data

    async def get(self, group: str) -> dict[int, tuple[int, Offsets]]:
        return {int(pid): (e["epoch"], {(t, p): (o, m) for t, p, o, m in e["offsets"]})
                for pid, e in self.data.get(group, {}).items()}

    async def put(self, group: str, pid: int, epoch: int, offsets: Offsets) -> None:
        async with self._lock:
            data = json.loads(json.dumps(self.data))
            data.setdefault(group, {})[str(pid)] = {"epoch": epoch,
                                                    "offsets": [[t, p, o, m] for (t, p), (o, m) in offsets.items()]}
            await self._save(data)

    async def finish(self, group: str, pid: int, commit: bool, store) -> Offsets | None:
        async with self._lock:
            entry = self.data.get(group, {}).get(str(pid))
            if entry is None:
                return None
            offsets = {(t, p): (o, m) for t, p, o, m in entry["offsets"]}
            if commit:
                await store.commit(group, offsets)
            data = json.loads(json.dumps(self.data))
            del data[group][str(pid)]
            if not data[group]:
                del data[group]
            await self._save(data)
            return offsets if commit else None


class ZkPending:
    def __init__(self, zk):
        self.zk = zk

    @staticmethod
    def _base(group: str) -> str:
        return f"{CONSUMERS}/{node_name(group)}/pending-offsets"

    async def get(self, group: str) -> dict[int, tuple[int, Offsets]]:
        return await self.zk.call(self._get, group)

    def _get(self, group: str) -> dict[int, tuple[int, Offsets]]:
        client = self.zk.client
        out = {}
        try:
            children = client.get_children(self._base(group))
        except NoNodeError:
            return out
        for child in children:
            try:
                data, _ = client.get(f"{self._base(group)}/{child}")
            except NoNodeError:
                continue
            entry = json.loads(data)
            out[int(child)] = (entry["epoch"], {(t, p): (o, m) for t, p, o, m in entry["offsets"]})
        return out

    async def put(self, group: str, pid: int, epoch: int, offsets: Offsets) -> None:
        await self.zk.call(self._put, group, pid, epoch, offsets)

    def _put(self, group: str, pid: int, epoch: int, offsets: Offsets) -> None:
        data = json.dumps({"epoch": epoch, "offsets": [[t, p, o, m] for (t, p), (o, m) in offsets.items()]}).encode()
        path = f"{self._base(group)}/{pid}"
        try:
            self.zk.client.set(path, data)
        except NoNodeError:
            try:
                self.zk.client.create(path, data, makepath=True)
            except NodeExistsError:
                self.zk.client.set(path, data)

    async def finish(self, group: str, pid: int, commit: bool, store) -> Offsets | None:
        return await self.zk.call(self._finish, group, pid, commit)

    def _finish(self, group: str, pid: int, commit: bool) -> Offsets | None:
        client = self.zk.client
        path = f"{self._base(group)}/{pid}"
        while True:
            try:
                data, stat = client.get(path)
            except NoNodeError:
                return None  # already applied or dropped
            entry = json.loads(data)
            offsets = {(t, p): (o, m) for t, p, o, m in entry["offsets"]}
            txn = client.transaction()
            txn.check(path, stat.version)
            if commit:
                for (topic, p), (offset, _meta) in offsets.items():
                    node = f"{CONSUMERS}/{node_name(group)}/offsets/{topic}/{p}"
                    client.ensure_path(f"{CONSUMERS}/{node_name(group)}/offsets/{topic}")
                    if client.exists(node):
                        txn.set_data(node, str(offset).encode())
                    else:
                        txn.create(node, str(offset).encode())
            txn.delete(path)
            results = txn.commit()
            if not any(isinstance(r, Exception) for r in results):
                return offsets if commit else None
            # lost a race (an offset node created meanwhile, the pending node rewritten): read again


class TxnOffsets:
    def __init__(self, broker):
        self.broker = broker
        self._pending = None
        self._completing: dict[str, int] = {}  # group -> markers being applied (stored, cache not yet updated)

    @property
    def pending(self):
        if self._pending is None:
            cluster = self.broker.cluster
            self._pending = ZkPending(cluster.zk) if cluster is not None else FilePending(self.broker.log_dirs[0])
        return self._pending

    async def commit(self, group_id: str, producer_id: int, producer_epoch: int, generation: int, member_id: str,
                     instance_id: str | None, offsets: Offsets) -> ErrorCode:
        """TxnOffsetCommit on the group's coordinator: checked like OffsetCommit, kept pending."""
        error = await self.broker.groups.load_for_commit(group_id)
        if error == ErrorCode.none:
            error, _group = self.broker.groups.check_committer(group_id, member_id, generation, instance_id)
        if error != ErrorCode.none:
            return error
        try:
            known = (await self.pending.get(group_id)).get(producer_id)
            if known is not None and known[0] > producer_epoch:
                return ErrorCode.producer_fenced
            merged = {**(known[1] if known is not None and known[0] == producer_epoch else {}), **offsets}
            await self.pending.put(group_id, producer_id, producer_epoch, merged)
        except OSError:
            return ErrorCode.coordinator_not_available
        return ErrorCode.none

    async def complete(self, group_id: str, producer_id: int, commit: bool) -> ErrorCode:
        """The transaction's marker for the group: apply or drop its pending offsets."""
        groups = self.broker.groups
        if groups.coordinator_id(group_id) != self.broker.node_id:
            return ErrorCode.not_coordinator
        self._completing[group_id] = self._completing.get(group_id, 0) + 1
        try:
            applied = await self.pending.finish(group_id, producer_id, commit, groups.store)
        except OSError:
            return ErrorCode.kafka_storage_error
        finally:
            self._completing[group_id] -= 1
            if not self._completing[group_id]:
                del self._completing[group_id]
        if applied and group_id in groups.offsets:
            groups.offsets[group_id].update(applied)
        return ErrorCode.none

    def completing(self, group_id: str) -> bool:
        """A marker of the group is being applied: the store may hold offsets the coordinator's cache has not yet
        (an OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT meanwhile)."""
        return group_id in self._completing

    async def unstable(self, group_id: str, partitions: list[tuple[str, int]] | None) -> set[tuple[str, int]]:
        """Partitions of the group with offsets pending in an open transaction."""
        pending = await self.pending.get(group_id)
        found = {tp for _epoch, offsets in pending.values() for tp in offsets}
        return found if partitions is None else found & set(partitions)

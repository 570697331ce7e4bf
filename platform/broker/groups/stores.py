"""Where group state outlives the coordinator.

Cluster mode: the paper's ZooKeeper registries (§3.2), visible with ``zkCli.sh``:

    /consumers/<group>/ids/<member>                 ephemeral: the consumer registry (subscription, client)
    /consumers/<group>/owners/<topic>/<partition>   ephemeral: the ownership registry (the owning member)
    /consumers/<group>/offsets/<topic>/<partition>  persistent: the offset registry (the offset, as text)

Ephemeral nodes belong to the coordinating broker's session, so they vanish with it; offsets survive any
failover and a full restart. Standalone mode keeps offsets in ``consumer-offsets.json`` in the first log dir and
has no registries. Also here: reading the consumer protocol's subscription and assignment bytes (only to fill
the registries; the coordinator passes them on untouched).
"""

from __future__ import annotations

import asyncio
import json
import os
import struct
import zlib
from urllib.parse import unquote

from broker.cluster.znodes import node_name
from broker.groups.consumer_group import partitions_by_topic
from broker.log.storage_errors import replace_file
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

CONSUMERS = "/consumers"
PROTOCOL_STATE = "protocol_state"  # a "consumer"-protocol group's state (KIP-848), beside the offsets registry
STALE = -2  # a group whose write was refused: no write until it is read again
COMPRESS_ABOVE = 64 * 1024  # a larger group state is stored zlib-compressed (JSON's repetitions shrink ~10x)
ZNODE_MAX = 1_000_000  # ZooKeeper's jute.maxbuffer (1 MiB by default) less room for the request around it
STATE_MAX = 64 * 1024 * 1024  # a state's JSON at most (written and read: a znode cannot inflate past it)


def encode_group_state(state: dict) -> bytes:
    """A "consumer"-protocol group's state as stored: JSON, zlib-compressed past :data:`COMPRESS_ABOVE` bytes (JSON
    starts with ``{``, zlib with 0x78: :func:`decode_group_state` tells them apart). A state that would not fit in
    a znode is a ValueError, not a request that ZooKeeper answers by dropping the broker's connection."""
    data = json.dumps(state, separators=(",", ":")).encode()
    if len(data) > STATE_MAX:
        raise ValueError(f"the group's state is {len(data):,} bytes of JSON, more than {STATE_MAX:,}: fewer members "
                         "or partitions per group")
    if len(data) > COMPRESS_ABOVE:
        data = zlib.compress(data, 6)
    if len(data) > ZNODE_MAX:
        raise ValueError(f"the group's state is {len(data):,} bytes compressed, more than a znode holds "
                         f"({ZNODE_MAX:,}): fewer members or partitions per group")
    return data


def decode_group_state(data: bytes) -> dict | None:
    """:func:`encode_group_state` reversed; None for what is neither, or inflates past :data:`STATE_MAX` (the group
    starts afresh)."""
    try:
        if data[:1] == b"\x78":
            inflater = zlib.decompressobj()
            data = inflater.decompress(data, STATE_MAX)
            if inflater.unconsumed_tail or not inflater.eof:
                return None
        return json.loads(data)
    except (ValueError, zlib.error):
        return None


class StaleGroupState(Exception):
    """Another coordinator wrote a "consumer"-protocol group's state since this broker read or wrote it: this
    broker's write is refused (a compare-and-set on the znode's version), so no coordinator overwrites what another
    stored. The coordinator forgets the group and reads it again."""


def _read_string(buf: bytes, pos: int) -> tuple[str, int]:
    (n,) = struct.unpack_from(">h", buf, pos)
    if n < 0 or pos + 2 + n > len(buf):
        raise struct.error(f"string of {n} bytes at {pos} does not fit")
    return buf[pos + 2: pos + 2 + n].decode(), pos + 2 + n


def _count(buf: bytes, pos: int, min_size: int) -> int:
    """An int32 element count that the remaining bytes can hold (elements of at least ``min_size`` bytes)."""
    (n,) = struct.unpack_from(">i", buf, pos)
    if n < 0 or n * min_size > len(buf) - pos - 4:
        raise struct.error(f"{n} elements cannot fit in {len(buf) - pos - 4} bytes")
    return n


def subscription_topics(metadata: bytes) -> list[str]:
    """Topics of a ConsumerProtocolSubscription (version, topics, user data, ...)."""
    try:
        pos = 2
        count = _count(metadata, pos, 2)
        pos += 4
        topics = []
        for _ in range(count):
            name, pos = _read_string(metadata, pos)
            topics.append(name)
        return topics
    except (struct.error, UnicodeDecodeError):
        return []


def encode_assignment(partitions) -> bytes:
    """(topic, partition) pairs as the classic consumer protocol's Assignment v0 (what DescribeGroups shows)."""
    by_topic = partitions_by_topic(partitions)
    out = [struct.pack(">hi", 0, len(by_topic))]
    for topic, numbers in by_topic.items():
        name = topic.encode()
        out.append(struct.pack(">h", len(name)) + name + struct.pack(">i", len(numbers)))
        out.append(b"".join(struct.pack(">i", n) for n in numbers))
    out.append(struct.pack(">i", -1))  # no user data
    return b"".join(out)


def assignment_partitions(assignment: bytes) -> list[tuple[str, int]]:
    """(topic, partition) pairs of a ConsumerProtocolAssignment (version, [topic, [partition]], user data)."""
    try:
        pos = 2
        count = _count(assignment, pos, 6)
        pos += 4
        out = []
        for _ in range(count):
            topic, pos = _read_string(assignment, pos)
            n = _count(assignment, pos, 4)
            pos += 4
            out.extend((topic, p) for p in struct.unpack_from(f">{n}i", assignment, pos))
            pos += 4 * n
        return out
    except (struct.error, UnicodeDecodeError):
        return []


def _read_json_object(path: str) -> dict:
    """A JSON object from a file; {} when the file is missing, unreadable or holds something else."""
    try:
        with open(path) as f:
            found = json.load(f)
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


class FileOffsetStore:
    """Standalone mode: committed offsets in one JSON file, rewritten whole on every commit. A commit the disk
    refuses raises OSError and changes nothing, in memory or on disk."""

    def __init__(self, log_dir: str):
        self.path = os.path.join(log_dir, "consumer-offsets.json")
        self._lock = asyncio.Lock()
        self.offsets: dict[str, dict[tuple[str, int], tuple[int, str]]] = {}
        self._groups_path = os.path.join(log_dir, "consumer-groups.json")
        self._groups_cache = _read_json_object(self._groups_path)  # at start, as the offsets file
        if os.path.exists(self.path):
            with open(self.path) as f:
                for group, entries in json.load(f).items():
                    self.offsets[group] = {(t, int(p)): (o, m) for t, p, o, m in entries}

    async def load(self, group: str) -> dict[tuple[str, int], tuple[int, str]]:
        return dict(self.offsets.get(group, {}))

    async def commit(self, group: str, offsets: dict[tuple[str, int], tuple[int, str]]) -> None:
        async with self._lock:  # the fsync runs off the event loop; commits are written in order
            merged = {**self.offsets.get(group, {}), **offsets}
            await self._write({**self.offsets, group: merged})
            self.offsets[group] = merged

    async def _write(self, offsets: dict) -> None:
        """The whole file replaced with ``offsets`` (off the event loop); OSError leaves the old one."""
        snapshot = {g: [[t, p, o, m] for (t, p), (o, m) in e.items()] for g, e in offsets.items()}
        await asyncio.to_thread(replace_file, self.path, json.dumps(snapshot))

    async def delete_offsets(self, group: str, partitions: list[tuple[str, int]]) -> None:
        """OffsetDelete: these partitions' committed offsets go (OSError: nothing changed)."""
        async with self._lock:
            kept = {tp: v for tp, v in self.offsets.get(group, {}).items() if tp not in set(partitions)}
            await self._write({**self.offsets, group: kept})
            self.offsets[group] = kept

    async def groups(self) -> list[str]:
        """Groups with committed offsets."""
        return [g for g, entries in self.offsets.items() if entries]

    async def delete(self, group: str) -> None:
        """The group's offsets gone from the file (DeleteGroups); OSError changes nothing."""
        async with self._lock:
            if group not in self.offsets:
                return
            await self._write({g: e for g, e in self.offsets.items() if g != group})
            del self.offsets[group]

    async def load_consumer_group(self, group: str) -> dict | None:
        """The last saved state of a "consumer"-protocol group (KIP-848), or None."""
        return self._groups_cache.get(group)

    async def save_consumer_group(self, group: str, state: dict | None) -> None:
        """A "consumer"-protocol group's state (None: the group is gone) in ``consumer-groups.json``."""
        async with self._lock:
            groups = self._groups_cache
            if state is None and group not in groups:
                return
            groups = {g: v for g, v in groups.items() if g != group} | ({group: state} if state is not None else {})
            await asyncio.to_thread(replace_file, self._groups_path, json.dumps(groups))
            self._groups_cache = groups

    async def member_joined(self, group: str, member_id: str, data: dict) -> None:
        pass

    async def member_left(self, group: str, member_id: str) -> None:
        pass

    async def owners(self, group: str, owners: dict[tuple[str, int], str]) -> None:
        pass


class ZkOffsetStore:
    """Cluster mode: the paper's registries in ZooKeeper (calls run on the ZooKeeper worker thread)."""

    def __init__(self, zk):
        self.zk = zk
        # group -> protocol_state's znode version last read or written (-1: no znode; STALE: read before writing)
        self._versions: dict[str, int] = {}

    async def load(self, group: str) -> dict[tuple[str, int], tuple[int, str]]:
        return await self.zk.call(self._load, group)

    def _load(self, group: str) -> dict[tuple[str, int], tuple[int, str]]:
        client = self.zk.client
        base = f"{CONSUMERS}/{node_name(group)}/offsets"
        out = {}
        try:
            topics = client.get_children(base)
        except NoNodeError:
            return out
        for topic in topics:
            for p in client.get_children(f"{base}/{topic}"):
                data, _ = client.get(f"{base}/{topic}/{p}")
                out[(topic, int(p))] = (int(data.decode()), "")
        return out

    async def commit(self, group: str, offsets: dict[tuple[str, int], tuple[int, str]]) -> None:
        await self.zk.call(self._commit, group, offsets)

    def _commit(self, group: str, offsets: dict[tuple[str, int], tuple[int, str]]) -> None:
        for (topic, p), (offset, _meta) in offsets.items():
            self._persistent(f"{CONSUMERS}/{node_name(group)}/offsets/{topic}/{p}", str(offset).encode())

    async def delete_offsets(self, group: str, partitions: list[tuple[str, int]]) -> None:
        """OffsetDelete: the partitions' nodes of the offset registry."""
        await self.zk.call(self._delete_offsets, group, partitions)

    def _delete_offsets(self, group: str, partitions: list[tuple[str, int]]) -> None:
        base = f"{CONSUMERS}/{node_name(group)}/offsets"
        for topic, p in partitions:
            self._delete(f"{base}/{topic}/{p}")
            try:  # the topic's node once it holds no partition (a registry without the topic)
                self.zk.client.delete(f"{base}/{topic}")
            except (NoNodeError, NotEmptyError):
                pass

    async def groups(self) -> list[str]:
        """Groups with an offset registry that holds offsets."""
        return await self.zk.call(self._groups)

    def _groups(self) -> list[str]:
        client = self.zk.client
        try:
            names = client.get_children(CONSUMERS)
        except NoNodeError:
            return []
        out = []
        for name in names:
            try:
                if client.get_children(f"{CONSUMERS}/{name}/offsets"):
                    out.append(unquote(name, errors="surrogatepass"))  # node_name's inverse
            except NoNodeError:
                continue
        return out

    async def delete(self, group: str) -> None:
        """DeleteGroups of an empty group: its whole ``/consumers/<group>`` subtree (offsets, and the ids and
        owners registries its past members left)."""
        await self.zk.call(self._delete_group, group)

    def _delete_group(self, group: str) -> None:
        path = f"{CONSUMERS}/{node_name(group)}"
        for _ in range(3):  # a registry node written meanwhile makes a recursive delete find a non-empty node
            try:
                self.zk.client.delete(path, recursive=True)
                return
            except NoNodeError:
                return
            except NotEmptyError:
                continue
        try:  # the offsets at least: no member commits to an empty group's registry
            self.zk.client.delete(f"{path}/offsets", recursive=True)
        except NoNodeError:
            pass

    async def load_consumer_group(self, group: str) -> dict | None:
        """The last saved state of a "consumer"-protocol group (KIP-848), or None."""
        return await self.zk.call(self._load_consumer_group, group)

    def _load_consumer_group(self, group: str) -> dict | None:
        try:
            data, stat = self.zk.client.get(f"{CONSUMERS}/{node_name(group)}/{PROTOCOL_STATE}")
        except NoNodeError:
            self._versions[group] = -1
            return None
        self._versions[group] = stat.version
        return decode_group_state(data)

    async def save_consumer_group(self, group: str, state: dict | None) -> None:
        """A "consumer"-protocol group's state in ``/consumers/<group>/protocol_state`` (None deletes it), written
        only over the version this broker last read or wrote: StaleGroupState when another coordinator wrote it
        meanwhile (a group this broker never read is written as before, unconditionally)."""
        await self.zk.call(self._save_consumer_group, group, state)  # encoded there, off the event loop (a large
        # group's JSON and its compression take milliseconds; the snapshot is a structure of its own)

    def _save_consumer_group(self, group: str, state: dict | None) -> None:
        data = None if state is None else encode_group_state(state)
        path = f"{CONSUMERS}/{node_name(group)}/{PROTOCOL_STATE}"
        client, expected = self.zk.client, self._versions.get(group)
        try:
            if expected == STALE:
                raise StaleGroupState(f"{path} changed since this broker read it; it must be read again first")
            if expected is None:  # never read here (a deletion of a group not loaded): as before
                if data is None:
                    self._delete(path)
                else:
                    self._persistent(path, data)
                return
            if data is None:
                if expected >= 0:
                    client.delete(path, version=expected)
                elif client.exists(path) is not None:
                    raise StaleGroupState(f"{path} was created by another coordinator")
                self._versions[group] = -1
            elif expected < 0:
                client.create(path, data, makepath=True)
                self._versions[group] = 0
            else:
                self._versions[group] = client.set(path, data, version=expected).version
        except (BadVersionError, NodeExistsError):
            self._versions[group] = STALE  # read again before the next write
            raise StaleGroupState(f"{path} was written by another coordinator since version {expected}") from None
        except NoNodeError:
            if data is None:
                self._versions[group] = -1
                return
            self._versions[group] = STALE
            raise StaleGroupState(f"{path} was deleted by another coordinator") from None
        except StaleGroupState:
            self._versions[group] = STALE
            raise

    def _persistent(self, path: str, data: bytes) -> None:
        client = self.zk.client
        try:
            client.set(path, data)
        except NoNodeError:
            try:
                client.create(path, data, makepath=True)
            except NodeExistsError:
                client.set(path, data)

    async def member_joined(self, group: str, member_id: str, data: dict) -> None:
        await self.zk.call(self._ephemeral, f"{CONSUMERS}/{node_name(group)}/ids/{node_name(member_id)}",
                           json.dumps(data).encode())

    async def member_left(self, group: str, member_id: str) -> None:
        await self.zk.call(self._delete, f"{CONSUMERS}/{node_name(group)}/ids/{node_name(member_id)}")

    async def owners(self, group: str, owners: dict[tuple[str, int], str]) -> None:
        await self.zk.call(self._owners, group, owners)

    def _owners(self, group: str, owners: dict[tuple[str, int], str]) -> None:
        client = self.zk.client
        base = f"{CONSUMERS}/{node_name(group)}/owners"
        try:
            for topic in client.get_children(base):
                for p in client.get_children(f"{base}/{topic}"):
                    if (topic, int(p)) not in owners:
                        self._delete(f"{base}/{topic}/{p}")
        except NoNodeError:
            pass
        for (topic, p), member_id in owners.items():
            self._ephemeral(f"{base}/{topic}/{p}", member_id.encode())

    def _ephemeral(self, path: str, data: bytes) -> None:
        client = self.zk.client
        try:
            client.create(path, data, ephemeral=True, makepath=True)
        except NodeExistsError:
            client.set(path, data)

    def _delete(self, path: str) -> None:
        try:
            self.zk.client.delete(path)
        except NoNodeError:
            pass

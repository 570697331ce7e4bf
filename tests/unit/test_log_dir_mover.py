"""A replica's move between log dirs without a broker (broker.log.dir_mover, broker.log.manager): a copy pass brings
the target up to the source, copying only what grew, whole files again when they were replaced or shrank, and
removing what is gone; start-up finishes or removes what an interrupted move left."""

import os

import pytest

from broker.log.dir_mover import CopyState, copy_pass
from broker.log.log import LogConfig
from broker.log.manager import LogManager

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


def snapshot(path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir())}


def test_a_copy_pass_copies_what_changed(tmp_path):
    src, dst = tmp_path / "t-0", tmp_path / "t-0.ab-future"
    src.mkdir()
    (src / "00000000000000000000.log").write_bytes(b"a" * 5000)
    (src / "00000000000000000000.index").write_bytes(b"i" * 16)
    (src / "leader-epoch-checkpoint").write_text("0\n1\n0 0\n")
    (src / "00000000000000000000.log.deleted").write_bytes(b"gone")  # transient: never copied
    state = CopyState()
    assert copy_pass(str(src), str(dst), state) == 5000 + 16 + 8
    expected = {k: v for k, v in snapshot(src).items() if not k.endswith(".deleted")}
    assert snapshot(dst) == expected
    assert copy_pass(str(src), str(dst), state) == 8  # nothing grew; the small files are copied whole every time

    with open(src / "00000000000000000000.log", "ab") as f:  # appended: only the tail
        f.write(b"b" * 300)
    (src / "epoch.tmp").write_text("0\n1\n0 7\n")
    os.replace(src / "epoch.tmp", src / "leader-epoch-checkpoint")  # replaced: a new inode, copied whole
    with open(src / "00000000000000000000.index", "r+b") as f:  # shrank: copied whole
        f.truncate(8)
    (src / "00000000000000005000.log").write_bytes(b"c" * 10)  # new
    assert copy_pass(str(src), str(dst), state) == 300 + 8 + 8 + 10
    assert copy_pass(str(src), str(dst), state, frozenset({"00000000000000005000.log"})) == 8 + 10  # asked whole
    assert snapshot(dst) == {k: v for k, v in snapshot(src).items() if not k.endswith(".deleted")}

    os.unlink(src / "00000000000000000000.log")  # retention: gone from the copy too
    os.unlink(src / "00000000000000000000.index")
    copy_pass(str(src), str(dst), state)
    assert snapshot(dst) == {k: v for k, v in snapshot(src).items() if not k.endswith(".deleted")}
    assert sorted(state.files) == ["00000000000000005000.log", "leader-epoch-checkpoint"]


def test_start_up_finishes_or_removes_an_interrupted_move(tmp_path):
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    for path in (d1 / "t-0", d2 / "t-0.ab12-ready", d2 / "u-0.cd34-ready", d1 / "u-0.cd34-delete",
                 d1 / "v-1.ef56-delete", d2 / "w-0.0a1b-future"):
        path.mkdir(parents=True)
    manager = LogManager([str(d1), str(d2)], lambda topic: LogConfig())
    manager.load()
    assert sorted(os.listdir(d1)) == ["t-0"]  # the abandoned copy and the retired directories removed
    # a complete copy whose source was already retired is the replica; a partial copy is never promoted
    assert sorted(os.listdir(d2)) == ["u-0"]
    assert manager.dir_of("t", 0) == str(d1) and manager.dir_of("u", 0) == str(d2) and manager.dir_of("w", 0) is None
    manager.shutdown()

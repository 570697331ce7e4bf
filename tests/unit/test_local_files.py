"""The warehouse's plain-file primitives (spark_jobs.files.LocalFiles, the DAG's plan and reconcile tasks on a
file:// warehouse) keep the meaning of the Hadoop ones the load task uses on the same directory: URLs in either
spelling, listings without checksum side files, no move onto an existing file, and a replaced file's stale
checksum removed (Hadoop would refuse to read the new content against it)."""

import json

import pytest

from spark_jobs.files import LocalFiles, is_local
from spark_jobs.warehouse import PUBLISHING, Warehouse

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


def test_urls_in_both_spellings_and_listings_without_checksums(tmp_path):
    url = tmp_path.as_uri()
    files = LocalFiles(url)
    files.write_bytes(f"{url}/a/b/one.json", b"1")
    (tmp_path / "a" / "b" / ".one.json.crc").write_bytes(b"crc")  # as Hadoop's local filesystem leaves it
    hadoop_spelling = f"file:{tmp_path}/a/b/one.json"  # Hadoop's Path.toString() of a local file
    assert files.read_bytes(hadoop_spelling) == b"1" and files.exists(hadoop_spelling)
    assert files.list_files(f"{url}/a") == [f"{url}/a/b/one.json"]
    assert files.list_dir(f"{url}/a/b") == ["one.json"]
    assert files.list_files(f"{url}/nothing") == [] and files.list_dir(f"{url}/nothing") == []
    assert files.read_bytes(f"{url}/nothing") is None and files.size(f"{url}/a") == 1
    assert is_local(url) and not is_local("hdfs://nn:8020/wh") and not is_local("/plain/path")


def test_a_replaced_moved_or_deleted_file_takes_its_checksum_along(tmp_path):
    url = tmp_path.as_uri()
    files = LocalFiles(url)
    (tmp_path / "_ledger.json").write_text("old")
    (tmp_path / "._ledger.json.crc").write_bytes(b"checksum of old")
    files.write_bytes(f"{url}/_ledger.json", b"new")
    assert (tmp_path / "_ledger.json").read_text() == "new" and not (tmp_path / "._ledger.json.crc").exists()
    assert not list(tmp_path.glob("*.tmp"))
    (tmp_path / "part.parquet").write_bytes(b"p")
    (tmp_path / ".part.parquet.crc").write_bytes(b"c")
    files.move(f"{url}/part.parquet", f"{url}/topic=t/part.parquet")
    assert (tmp_path / "topic=t" / "part.parquet").read_bytes() == b"p"
    assert not (tmp_path / ".part.parquet.crc").exists()
    (tmp_path / "again.parquet").write_bytes(b"p2")  # the same staged file, moved again by a finished publication
    (tmp_path / "topic=t" / ".part.parquet.crc").write_bytes(b"checksum of p")
    files.move(f"{url}/again.parquet", f"{url}/topic=t/part.parquet")  # over a file: replaced, as Hadoop's local
    assert (tmp_path / "topic=t" / "part.parquet").read_bytes() == b"p2"  # rename does
    assert not (tmp_path / "topic=t" / ".part.parquet.crc").exists()
    (tmp_path / "other").write_bytes(b"o")
    with pytest.raises(OSError):  # onto a directory: refused
        files.move(f"{url}/other", f"{url}/topic=t")
    with pytest.raises(OSError):  # nothing to move
        files.move(f"{url}/gone", f"{url}/elsewhere")
    assert (tmp_path / "other").read_bytes() == b"o"
    (tmp_path / ".other.crc").write_bytes(b"c")
    files.delete(f"{url}/other")
    files.delete(f"{url}/topic=t")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["_ledger.json"]


def test_paths_are_taken_literally_as_hadoop_takes_them(tmp_path):
    """``Path.as_uri()`` percent-encodes (``=`` → ``%3D``); Hadoop's Path does not decode, so the load's files are
    in the literal directory: the plain-file calls must find them there too."""
    url = (tmp_path / "wh=1").as_uri()
    assert "%3D" in url
    LocalFiles(url).write_bytes(f"{url}/_ledger.json", b"{}")
    assert (tmp_path / "wh%3D1" / "_ledger.json").read_bytes() == b"{}"
    assert LocalFiles(url).list_files(url) == [f"{url}/_ledger.json"]
    with pytest.raises(ValueError):
        LocalFiles("hdfs://nn:8020/wh")


def test_a_publication_left_by_a_killed_load_is_rolled_forward_without_spark(tmp_path):
    """A load killed half way through its moves (its intent written by the Hadoop path, in Hadoop's spelling):
    the plan task's recovery on plain files finishes the moves, writes the manifest and advances the ledger."""
    url = tmp_path.as_uri()
    wh = Warehouse(None, url)
    staging = tmp_path / "_staging" / "load-000001"
    (staging / "data" / "topic=t" / "date=2026-11-29" / "hour=01").mkdir(parents=True)
    moved = tmp_path / "topic=t" / "date=2026-11-29" / "hour=01"
    moved.mkdir(parents=True)
    (moved / "load-000001-part-0.parquet").write_bytes(b"first")  # moved before the kill
    (staging / "data" / "topic=t" / "date=2026-11-29" / "hour=01" / "part-1.parquet").write_bytes(b"second")
    moves = [[f"file:{staging}/data/topic=t/date=2026-11-29/hour=01/part-0.parquet",
              f"{url}/topic=t/date=2026-11-29/hour=01/load-000001-part-0.parquet"],
             [f"file:{staging}/data/topic=t/date=2026-11-29/hour=01/part-1.parquet",
              f"{url}/topic=t/date=2026-11-29/hour=01/load-000001-part-1.parquet"]]
    manifest = {"load_id": 1, "ranges": {"t": {"0": [0, 7]}}, "files": [dst for _, dst in moves]}
    (staging / PUBLISHING).write_text(json.dumps({"moves": moves, "manifest": manifest}))
    (tmp_path / "_staging" / "load-000002").mkdir()  # a load that died before publishing: discarded
    assert wh.recover() == ["rolled load 1 forward", "discarded the staging output of load 2"]
    assert sorted(p.name for p in moved.iterdir()) == ["load-000001-part-0.parquet", "load-000001-part-1.parquet"]
    assert wh.ledger() == {"load_id": 1, "offsets": {"t": {"0": 7}}}
    assert wh.manifests() == [manifest] and wh.list_dir(wh.path("_staging")) == []
    with pytest.raises(ValueError):
        Warehouse(None, "hdfs://nn:8020/wh")


def test_a_ledger_lost_mid_write_is_rebuilt_from_every_manifest(tmp_path):
    """The Hadoop path replaces a file by delete, then rename: a kill in between leaves no ledger. Recovery folds
    every published manifest in order, so partitions the last load did not touch keep their offsets."""
    url = tmp_path.as_uri()
    wh = Warehouse(None, url)
    for manifest in ({"load_id": 1, "ranges": {"t": {"0": [0, 5], "1": [0, 7]}}},
                     {"load_id": 2, "ranges": {"t": {"0": [5, 9]}}}):
        wh.write_text(wh.path("_manifests", f"load-{manifest['load_id']:06d}.json"), json.dumps(manifest))
    assert wh.recover() == ["ledger advanced to load 2"]
    assert wh.ledger() == {"load_id": 2, "offsets": {"t": {"0": 9, "1": 7}}}


def test_publication_under_a_warehouse_whose_own_path_holds_a_data_directory(tmp_path):
    root = tmp_path / "data" / "wh"
    wh = Warehouse(None, root.as_uri())
    staged = root / "_staging" / "load-000001" / "data" / "topic=t" / "date=2026-11-29" / "hour=03"
    staged.mkdir(parents=True)
    (staged / "part-0.parquet").write_bytes(b"rows")
    wh.publish(1, {"ranges": {"t": {"0": [0, 3]}}})
    assert (root / "topic=t" / "date=2026-11-29" / "hour=03" / "load-000001-part-0.parquet").read_bytes() == b"rows"
    assert wh.ledger() == {"load_id": 1, "offsets": {"t": {"0": 3}}}

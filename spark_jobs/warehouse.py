"""The warehouse's file layout, staging and atomic publication, on Hadoop's FileSystem API (through the Spark
session's JVM) so that ``file://``, ``hdfs://`` and ``s3a://`` warehouse URLs take the same path; a ``file://``
warehouse is also reached without a session, by plain file calls (:mod:`spark_jobs.files`: the DAG's plan and
reconcile tasks).

Layout under the warehouse URL::

    topic=<t>/date=<YYYY-MM-DD>/hour=<HH>/load-<id>-part-*.parquet     the data (Spark can read it Hive-style)
    _quarantine/topic=<t>/date=.../hour=.../load-<id>-part-*.parquet     records that could not be decoded
    _audit/counts/load-<id>.json                                        the warehouse tier counts of that load
    _manifests/load-<id>.json                                           what a load published: the commit point
    _ledger.json                                                        next offset per topic-partition
    _staging/load-<id>/                                                 a load's output before publication

Publication: the load writes everything under its staging directory, then writes ``_staging/load-<id>/_PUBLISHING``
listing every move, moves the files into place, writes the manifest (temp file + rename) and only then the
ledger. ``recover()`` runs before every load: a staging directory with ``_PUBLISHING`` and no manifest is rolled
forward (the moves are finished, then manifest and ledger written); any other staging directory is discarded.
So a job killed at any point and run again publishes each range exactly once.
"""

from __future__ import annotations

import json

PUBLISHING = "_PUBLISHING"


class Warehouse:
    """``spark``: a session whose Hadoop FileSystem serves every URL scheme; None (a ``file://`` warehouse only):
    plain file calls, no JVM (:mod:`spark_jobs.files`)."""

    def __init__(self, spark, url: str):
        from spark_jobs.files import HadoopFiles, LocalFiles, is_local

        self.url = url.rstrip("/")
        if spark is None and not is_local(self.url):
            raise ValueError(f"warehouse {self.url}: only a file:// warehouse is reached without a Spark session")
        self.files = LocalFiles(self.url) if spark is None else HadoopFiles(spark, self.url)

    # ---- file primitives --------------------------------------------------------------------------------------
    def path(self, *parts: str) -> str:
        return "/".join([self.url, *parts])

    def exists(self, path: str) -> bool:
        return self.files.exists(path)

    def delete(self, path: str) -> None:
        self.files.delete(path)

    def write_bytes(self, path: str, data: bytes) -> None:
        """Written to a temp name, then renamed over the target: readers see the old or the new file."""
        self.files.write_bytes(path, data)

    def write_text(self, path: str, text: str) -> None:
        self.files.write_bytes(path, text.encode())

    def read_text(self, path: str) -> str | None:
        data = self.files.read_bytes(path)
        return None if data is None else data.decode()

    def list_files(self, path: str) -> list[str]:
        """Every file under ``path`` (recursive), as full URLs; empty when it does not exist."""
        return self.files.list_files(path)

    def size(self, path: str) -> int:
        """Bytes of every file under ``path`` (0 when it does not exist)."""
        return self.files.size(path)

    def list_dir(self, path: str) -> list[str]:
        return self.files.list_dir(path)

    def move(self, src: str, dst: str) -> None:
        self.files.move(src, dst)

    # ---- ledger, manifests, staging ------------------------------------------------------------------------------
    def ledger(self) -> dict:
        text = self.read_text(self.path("_ledger.json"))
        return json.loads(text) if text else {"load_id": 0, "offsets": {}}

    def manifests(self) -> list[dict]:
        return [json.loads(self.read_text(self.path("_manifests", name)))
                for name in self.list_dir(self.path("_manifests")) if name.endswith(".json")]

    def staging(self, load_id: int) -> str:
        return self.path("_staging", f"load-{load_id:06d}")

    def recover(self) -> list[str]:
        """Finish or discard what a killed load left behind; returns what it did, for the log."""
        done = []
        for name in self.list_dir(self.path("_staging")):
            staging = self.path("_staging", name)
            load_id = int(name.split("-")[1])
            intent = self.read_text(f"{staging}/{PUBLISHING}")
            manifest_path = self.path("_manifests", f"{name}.json")
            if intent is not None and not self.exists(manifest_path):
                self._publish(json.loads(intent))
                done.append(f"rolled load {load_id} forward")
            else:
                done.append(f"discarded the staging output of load {load_id}")
            self.delete(staging)
        ledger = self.ledger()
        behind = [m for m in self.manifests() if m["load_id"] > ledger["load_id"]]
        for manifest in behind:  # every one in order: a ledger lost mid-write (delete, then rename) starts at none
            self._advance(manifest)
        if behind:
            done.append(f"ledger advanced to load {behind[-1]['load_id']}")
        return done

    def publish(self, load_id: int, manifest: dict) -> None:
        """Move a load's staging output into place, then write its manifest and advance the ledger."""
        staging = self.staging(load_id)
        prefix = f"load-{load_id:06d}-"
        moves = []
        for kind, target_root in (("data", self.url), ("quarantine", self.path("_quarantine"))):
            root = f"{staging}/{kind}"
            marker = f"/_staging/load-{load_id:06d}/{kind}/"  # not "/data/": the warehouse's own path may hold one
            for f in self.list_files(root):
                rel = f[f.index(marker) + len(marker):]
                directory, _, base = rel.rpartition("/")
                if not base.endswith(".parquet") or "_temporary" in directory.split("/"):
                    continue  # _SUCCESS, .crc files, an uncommitted task's output
                moves.append([f, f"{target_root}/{directory}/{prefix}{base}" if directory
                              else f"{target_root}/{prefix}{base}"])
        counts = f"{staging}/counts.json"
        if self.exists(counts):
            moves.append([counts, self.path("_audit", "counts", f"load-{load_id:06d}.json")])
        manifest = {**manifest, "load_id": load_id, "files": [dst for _, dst in moves]}
        self.write_text(f"{staging}/{PUBLISHING}", json.dumps({"moves": moves, "manifest": manifest}))
        self._publish({"moves": moves, "manifest": manifest})
        self.delete(staging)

    def _publish(self, intent: dict) -> None:
        from spark_jobs import faults

        for i, (src, dst) in enumerate(intent["moves"]):
            faults.point("publish.move", i)
            if self.exists(src):
                self.move(src, dst)
            elif not self.exists(dst):
                raise OSError(f"publication of load {intent['manifest']['load_id']}: {src} and {dst} both missing")
        faults.point("publish.manifest")
        manifest = intent["manifest"]
        self.write_text(self.path("_manifests", f"load-{manifest['load_id']:06d}.json"), json.dumps(manifest))
        faults.point("publish.ledger")
        self._advance(manifest)

    def _advance(self, manifest: dict) -> None:
        offsets = self.ledger()["offsets"]
        for topic, parts in manifest["ranges"].items():
            for p, (_, until) in parts.items():
                offsets.setdefault(topic, {})[str(p)] = until
        self.write_text(self.path("_ledger.json"), json.dumps({"load_id": manifest["load_id"], "offsets": offsets}))

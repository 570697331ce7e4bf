"""The warehouse's file primitives, two ways with one meaning:

- :class:`HadoopFiles`: Hadoop's FileSystem API through a Spark session's JVM, so that ``file://``, ``hdfs://`` and
  ``s3a://`` warehouse URLs take the same path (the load task, ``logbus load``);
- :class:`LocalFiles`: plain ``os`` calls for a ``file://`` warehouse, for the DAG's ``plan`` and ``reconcile``
  tasks, whose work is a few small files: no JVM to start for them (a Spark session's start-up was most of each
  task's time, see the README's load section).

Both write a file to a temp name and rename it over the target, move a file over an existing one on a local disk
(Hadoop's local rename does; HDFS's answers false, an error), and list files without Hadoop's checksum side files
(``.<name>.crc``, written by Hadoop's local filesystem beside each file). :class:`LocalFiles` deletes a file's side file when it replaces,
moves or deletes the file: a stale checksum would make Hadoop refuse to read the new content.
"""

from __future__ import annotations

import os
import shutil
from urllib.parse import urlparse

from broker.log.storage_errors import _fsync_dir, replace_file


def is_local(url: str) -> bool:
    return urlparse(url).scheme == "file"


class HadoopFiles:
    def __init__(self, spark, url: str):
        jvm = spark.sparkContext._jvm
        self._jvm = jvm
        self._Path = jvm.org.apache.hadoop.fs.Path
        self.fs = self._Path(url).getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())

    def exists(self, path: str) -> bool:
        return self.fs.exists(self._Path(path))

    def delete(self, path: str) -> None:
        self.fs.delete(self._Path(path), True)

    def write_bytes(self, path: str, data: bytes) -> None:
        tmp = self._Path(path + ".tmp")
        out = self.fs.create(tmp, True)
        try:
            out.write(bytearray(data))
        finally:
            out.close()
        target = self._Path(path)
        if self.fs.exists(target):
            self.fs.delete(target, False)
        if not self.fs.rename(tmp, target):
            raise OSError(f"cannot rename {tmp} to {path}")

    def read_bytes(self, path: str) -> bytes | None:
        p = self._Path(path)
        if not self.fs.exists(p):
            return None
        stream = self.fs.open(p)
        try:
            return bytes(self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
        finally:
            stream.close()

    def list_files(self, path: str) -> list[str]:
        p = self._Path(path)
        if not self.fs.exists(p):
            return []
        out, it = [], self.fs.listFiles(p, True)
        while it.hasNext():
            out.append(it.next().getPath().toString())
        return sorted(out)

    def size(self, path: str) -> int:
        p = self._Path(path)
        return int(self.fs.getContentSummary(p).getLength()) if self.fs.exists(p) else 0

    def list_dir(self, path: str) -> list[str]:
        p = self._Path(path)
        if not self.fs.exists(p):
            return []
        return sorted(s.getPath().getName() for s in self.fs.listStatus(p))

    def move(self, src: str, dst: str) -> None:
        target = self._Path(dst)
        self.fs.mkdirs(target.getParent())
        if not self.fs.rename(self._Path(src), target):
            raise OSError(f"cannot move {src} to {dst}")


def _local(url: str) -> str:
    """``file:///a/b``, ``file:/a/b`` (Hadoop's spelling in listings) or ``file://localhost/a/b`` → ``/a/b``,
    taken literally as Hadoop's ``Path`` takes it: no percent-decoding (``file:///srv/wh%3D1`` is the directory
    ``/srv/wh%3D1`` for the load's Hadoop calls too), no query or fragment."""
    for prefix in ("file://localhost/", "file:///", "file:/"):
        if url.startswith(prefix):
            return "/" + url[len(prefix):].lstrip("/")
    raise ValueError(f"not a local file URL: {url}")


def _crc(path: str) -> str:
    head, name = os.path.split(path)
    return os.path.join(head, f".{name}.crc")


def _is_crc(name: str) -> bool:
    return name.startswith(".") and name.endswith(".crc")


class LocalFiles:
    """Paths are the warehouse's URLs (``file:///...``); listings answer in the warehouse URL's spelling."""

    def __init__(self, url: str):
        self.root_url = url.rstrip("/")
        self.root = _local(self.root_url)

    def _url(self, path: str) -> str:
        rel = os.path.relpath(path, self.root)
        return self.root_url if rel == "." else f"{self.root_url}/{rel}"

    def exists(self, path: str) -> bool:
        return os.path.lexists(_local(path))

    def delete(self, path: str) -> None:
        local = _local(path)
        if os.path.isdir(local) and not os.path.islink(local):
            shutil.rmtree(local)
        elif os.path.lexists(local):
            os.unlink(local)
        _unlink_quietly(_crc(local))

    def write_bytes(self, path: str, data: bytes) -> None:
        local = _local(path)
        os.makedirs(os.path.dirname(local), exist_ok=True)
        _unlink_quietly(_crc(local))
        replace_file(local, data)  # the broker's: temp file, fsync, rename, directory fsync

    def read_bytes(self, path: str) -> bytes | None:
        try:
            with open(_local(path), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def list_files(self, path: str) -> list[str]:
        local = _local(path)
        if os.path.isfile(local):
            return [self._url(local)]
        out = []
        for directory, _, names in os.walk(local):
            out.extend(self._url(os.path.join(directory, n)) for n in names if not _is_crc(n))
        return sorted(out)

    def size(self, path: str) -> int:
        return sum(os.path.getsize(_local(f)) for f in self.list_files(path))

    def list_dir(self, path: str) -> list[str]:
        local = _local(path)
        if not os.path.isdir(local):
            return []
        return sorted(n for n in os.listdir(local) if not _is_crc(n))

    def move(self, src: str, dst: str) -> None:
        """As Hadoop's local rename: a file replaces an existing file (both are the same staged output when a
        publication is finished again); a missing source or a directory in the way is refused."""
        source, target = _local(src), _local(dst)
        if not os.path.lexists(source) or os.path.isdir(target):
            raise OSError(f"cannot move {src} to {dst}")
        os.makedirs(os.path.dirname(target), exist_ok=True)
        _unlink_quietly(_crc(target))
        os.replace(source, target)
        _unlink_quietly(_crc(source))
        _fsync_dir(os.path.dirname(target))


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass

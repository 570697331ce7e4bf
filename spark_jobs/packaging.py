"""The code the load's Spark tasks import, as one zip that Spark ships to every executor (``sc.addPyFile``).

Spark's own way to put Python code on executors: a zip added to the context is fetched by each executor into its
working directory and put on its Python workers' ``sys.path``, ahead of site-packages. The same mechanism serves
``local[*]`` and a standalone cluster, so the executors need nothing of this checkout installed, only the Python
environment (pyspark, pyarrow, confluent-kafka, fastavro, ... — the driver's ``PYSPARK_PYTHON``).

Layout: packages at the zip's root, so ``import spark_jobs`` and ``import mirror`` work as they do on the driver:

    spark_jobs/...          the source (read() runs on executors), fetcher, bulk parser and Avro decoder
    broker/__init__.py      (empty: the parent package of broker.protocol)
    broker/protocol/...     record batches and Kafka's messages (spark_jobs.fetch, spark_jobs.columnar)
    broker/log/storage_errors.py   (one module: the crash-safe file replace spark_jobs.files writes with)
    mirror/...              mirror.wire: the blocking Kafka client spark_jobs.fetch reads with
    settings/...            settings.registry_client: the registry client of spark_jobs.decode

The zip is put ahead of the checkout on the driver's ``sys.path`` too, so a package's shipped part is all of it
that the driver sees when the package is first imported after the session started: every module that
``spark_jobs`` imports from ``broker`` must be in the zip (tests/unit/test_spark_packaging.py imports each
``spark_jobs`` module that way).

Only ``.py`` files; entries have a fixed timestamp and order, so the same sources make the same bytes. The zip is
named by the SHA-256 of its entries (``logbus-pyfiles-<16 hex>.zip``) and kept in a cache directory: a second
build of unchanged code reuses the file, a change makes a new name (Spark refuses to re-add a changed file under a
name it already shipped). Safe to call from several processes at once (written to a temporary name, then renamed).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PLATFORM = REPO / "platform"
# (path inside the zip, where it comes from): whole packages, each with every .py below it, or one module
PACKAGES: tuple[tuple[str, Path], ...] = (
    ("spark_jobs", REPO / "spark_jobs"),
    ("broker/protocol", PLATFORM / "broker" / "protocol"),
    ("broker/log/storage_errors.py", PLATFORM / "broker" / "log" / "storage_errors.py"),
    ("mirror", PLATFORM / "mirror"),
    ("settings", PLATFORM / "settings"),
)
ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # zip's epoch: entries do not carry the checkout's mtimes


def default_cache_dir() -> Path:
    """``$LOGBUS_PYFILES_CACHE`` or ``<tmp>/logbus-pyfiles``."""
    return Path(os.environ.get("LOGBUS_PYFILES_CACHE") or Path(tempfile.gettempdir()) / "logbus-pyfiles")


def entries(packages: tuple[tuple[str, Path], ...] = PACKAGES) -> dict[str, Path]:
    """{name in the zip: source file}, sorted by name; parents of nested packages and modules get their
    ``__init__.py``."""
    out: dict[str, Path] = {}
    for prefix, directory in packages:
        module = prefix.endswith(".py")  # one module of a package
        if not module and not (directory / "__init__.py").is_file():
            raise FileNotFoundError(f"{directory} is not a Python package (no __init__.py)")
        parts = prefix.split("/")
        for depth in range(1, len(parts)):  # broker/protocol -> broker/__init__.py
            parent = directory.parents[len(parts) - 1 - depth] / "__init__.py"
            out["/".join(parts[:depth]) + "/__init__.py"] = parent
        if module:
            out[prefix] = directory
            continue
        for path in directory.rglob("*.py"):
            rel = path.relative_to(directory)
            if "__pycache__" in rel.parts:
                continue
            out[f"{prefix}/{rel.as_posix()}"] = path
    return dict(sorted(out.items()))


def content_hash(files: dict[str, Path]) -> str:
    digest = hashlib.sha256()
    for name, path in files.items():
        data = path.read_bytes()
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def build(cache_dir: str | Path | None = None, packages: tuple[tuple[str, Path], ...] = PACKAGES) -> Path:
    """The zip of ``packages`` in ``cache_dir`` (default :func:`default_cache_dir`), built only if missing."""
    files = entries(packages)
    directory = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"logbus-pyfiles-{content_hash(files)[:16]}.zip"
    if target.is_file():
        return target
    fd, partial = tempfile.mkstemp(prefix=target.name + ".", suffix=".part", dir=directory)
    try:
        with os.fdopen(fd, "wb") as raw, zipfile.ZipFile(raw, "w", zipfile.ZIP_DEFLATED) as zf:
            for name, path in files.items():
                info = zipfile.ZipInfo(name, ZIP_TIME)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                zf.writestr(info, path.read_bytes())
        os.chmod(partial, 0o644)
        os.replace(partial, target)  # atomic: a concurrent builder of the same content wrote the same bytes
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
    return target

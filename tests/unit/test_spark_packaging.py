"""The zip of the load's task code (spark_jobs.packaging): what it holds, that it is built once per content and
anew when the code changes (that the executors' modules import from it alone: tests/integration/
test_spark_cluster.py)."""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from spark_jobs import packaging

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]

def test_the_packages_sit_at_the_zips_root_with_only_their_sources(tmp_path):
    path = packaging.build(tmp_path)
    names = zipfile.ZipFile(path).namelist()
    for name in ("spark_jobs/__init__.py", "spark_jobs/source.py", "spark_jobs/packaging.py", "broker/__init__.py",
                 "broker/protocol/codec.py", "mirror/wire.py", "settings/registry_client.py",
                 "broker/log/__init__.py", "broker/log/storage_errors.py"):
        assert name in names
    assert all(n.endswith(".py") for n in names) and not any("__pycache__" in n for n in names)
    assert not any(n.startswith(("broker/server", "platform/", "tests/")) for n in names)
    assert [n for n in names if n.startswith("broker/log/")] == ["broker/log/__init__.py", "broker/log/storage_errors.py"]
    assert names == sorted(names)
    expected = {f"spark_jobs/{p.relative_to(packaging.REPO / 'spark_jobs').as_posix()}"
                for p in (packaging.REPO / "spark_jobs").rglob("*.py") if "__pycache__" not in p.parts}
    assert expected <= set(names)
    with zipfile.ZipFile(path) as zf:
        assert zf.read("mirror/wire.py") == (packaging.PLATFORM / "mirror" / "wire.py").read_bytes()


def test_every_spark_jobs_module_imports_with_the_zip_ahead_of_the_checkout(tmp_path):
    """The driver's view after ``addPyFile``: the zip first on ``sys.path``, so ``broker`` is the zip's package
    when it is first imported after that. CI's failure of 1f4349a: spark_jobs.files imported
    broker.log.storage_errors, not in the zip, and every ``logbus load`` failed with ModuleNotFoundError."""
    path = packaging.build(tmp_path)
    modules = sorted(f"spark_jobs.{p.stem}" for p in (packaging.REPO / "spark_jobs").glob("*.py")
                     if p.stem not in ("__init__", "dag"))  # dag: Airflow's module, never on a Spark driver
    probe = (f"import sys; sys.path.insert(0, {str(path)!r})\n"
             f"import importlib\n"
             f"for name in {modules!r}: importlib.import_module(name)\n"
             f"import broker, spark_jobs\n"
             f"assert broker.__file__.startswith({str(path)!r}), broker.__file__\n"
             f"assert spark_jobs.__file__.startswith({str(path)!r}), spark_jobs.__file__\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=50,
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                             [str(packaging.PLATFORM), str(packaging.REPO)])})
    assert out.returncode == 0, out.stderr[-2000:]


def test_a_single_module_brings_its_packages_inits(tmp_path):
    (tmp_path / "outer" / "inner").mkdir(parents=True)
    for rel in ("outer/__init__.py", "outer/inner/__init__.py", "outer/inner/one.py", "outer/inner/two.py"):
        (tmp_path / rel).write_text("")
    names = list(packaging.entries((("outer/inner/one.py", tmp_path / "outer" / "inner" / "one.py"),)))
    assert names == ["outer/__init__.py", "outer/inner/__init__.py", "outer/inner/one.py"]


def test_unchanged_code_reuses_the_cached_zip(tmp_path):
    first = packaging.build(tmp_path)
    stat = first.stat()
    second = packaging.build(tmp_path)
    assert second == first and second.stat().st_mtime_ns == stat.st_mtime_ns and second.stat().st_ino == stat.st_ino
    assert first.name.startswith("logbus-pyfiles-") and len(first.stem) == len("logbus-pyfiles-") + 16
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no partial file left behind


def test_the_same_sources_make_the_same_bytes_in_another_cache(tmp_path):
    a = packaging.build(tmp_path / "a")
    b = packaging.build(tmp_path / "b")
    assert a.name == b.name and a.read_bytes() == b.read_bytes()


def test_a_changed_file_makes_a_new_zip(tmp_path):
    pkg = tmp_path / "src" / "jobs"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "task.py").write_text("VERSION = 1\n")
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "task.cpython-311.pyc").write_bytes(b"junk")
    (pkg / "notes.txt").write_text("not Python")
    packages = (("jobs", pkg),)
    one = packaging.build(tmp_path / "cache", packages)
    assert zipfile.ZipFile(one).namelist() == ["jobs/__init__.py", "jobs/task.py"]
    (pkg / "task.py").write_text("VERSION = 2\n")
    two = packaging.build(tmp_path / "cache", packages)
    assert two != one and one.exists()
    assert zipfile.ZipFile(two).read("jobs/task.py") == b"VERSION = 2\n"
    (pkg / "task.py").write_text("VERSION = 1\n")
    assert packaging.build(tmp_path / "cache", packages) == one


def test_a_nested_package_brings_its_parents_init(tmp_path):
    inner = tmp_path / "outer" / "inner"
    inner.mkdir(parents=True)
    (tmp_path / "outer" / "__init__.py").write_text("OUTER = True\n")
    (tmp_path / "outer" / "heavy.py").write_text("raise ImportError('not shipped')\n")
    (inner / "__init__.py").write_text("")
    names = list(packaging.entries((("outer/inner", inner),)))
    assert names == ["outer/__init__.py", "outer/inner/__init__.py"]


def test_a_directory_that_is_no_package_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="no __init__.py"):
        packaging.build(tmp_path / "cache", (("nothing", tmp_path),))

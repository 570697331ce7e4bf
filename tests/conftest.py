import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

# The JVMs the tests start (Spark drivers, masters, workers and executors, ZooKeeper) live for seconds to minutes:
# C1 alone compiles what they run for less CPU than C1 and C2 (a small load, measured once: 26 CPU-s against 37).
# Outside the tests `logbus up` and the loads keep the JVM's defaults (in them they inherit this). Set it to override.
os.environ.setdefault("JDK_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1")

from support import BrokerProcess, Cluster, RegistryProcess  # noqa: E402


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """A standalone broker shared by a test module; every test uses its own topics."""
    proc = BrokerProcess(tmp_path_factory.mktemp("broker"), num_partitions=1).start()
    yield proc
    proc.stop()


@pytest.fixture
def fresh_broker(tmp_path):
    """A broker of the test's own, for tests that restart, kill or reconfigure it."""
    procs = []

    def make(**overrides):
        proc = BrokerProcess(tmp_path / f"b{len(procs)}", **overrides)
        procs.append(proc)
        return proc

    yield make
    for proc in procs:
        proc.stop()


@pytest.fixture
def cluster(tmp_path):
    """A real ZooKeeper and three brokers; a test may pass overrides with ``cluster.make(**overrides)``."""
    made = []

    def make(size: int = 3, **overrides):
        c = Cluster(tmp_path / f"cluster{len(made)}", size, **overrides)
        made.append(c)
        return c.start()

    yield make
    for c in made:
        c.stop()


@pytest.fixture
def registry(tmp_path):
    """``registry(bootstrap, **settings)`` starts a schema registry process; all are stopped at the end."""
    made = []

    def make(bootstrap: str, **settings):
        proc = RegistryProcess(tmp_path / f"registry{len(made)}", bootstrap, **settings)
        made.append(proc)
        return proc.start()

    yield make
    for proc in made:
        proc.stop()


def pytest_itemcollected(item):
    """Groups for ``--dist loadgroup`` (pytest-xdist, two workers by default): a module's tests stay together (its
    module-scoped cluster is made once), and the whole-topology tests (e2e, compose) run one after another on one
    worker — two topologies of ~40 processes at once would not fit two cores. Set as each item is collected:
    xdist reads the marks in its own ``pytest_collection_modifyitems``, which may run before any conftest's."""
    heavy = item.get_closest_marker("e2e") or item.get_closest_marker("compose")
    item.add_marker(pytest.mark.xdist_group("topology" if heavy else item.nodeid.split("::")[0]))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """pytest-xdist 3.8 puts an item's group into its node id by setting ``item._nodeid``, which pytest 9.2 no
    longer reads (``nodeid`` comes from ``item._id``): without this, ``--dist loadgroup`` groups nothing."""
    if not getattr(config.option, "loadgroup", False):
        return
    from _pytest.nodeid import NodeId

    for item in items:
        groups = sorted({str(m.args[0]) for m in item.iter_markers("xdist_group") if m.args})
        if groups and "@" not in item.nodeid.rsplit("]", 1)[-1]:
            item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(groups)}")


@pytest.fixture
def topology_dir():
    """A temporary directory for a ``logbus up`` state that the ``postgres`` user can reach: as root, PostgreSQL
    runs as that user, and pytest's own base directory (/tmp/pytest-of-root) is 0700. (``logbus postgres`` would
    then bind-mount its data in a namespace of its own — tested in test_postgres_unreachable.py; the whole-topology
    tests keep to the plain path.) Removed afterwards."""
    import os
    import shutil
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="logbus-topology-test-"))
    os.chmod(base, 0o711)  # searchable, not listable, by other users
    try:
        yield base
    finally:
        if os.environ.get("LOGBUS_KEEP_TEST_STATE"):  # a developer's post-mortem: logs stay, the path is printed
            print(f"topology state kept in {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)

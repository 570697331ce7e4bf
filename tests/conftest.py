import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

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

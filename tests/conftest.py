"""The suite's one conftest: every shared fixture, and the leak check every test passes.

Fixtures are written in tests/fixtures/ (one module per kind of thing) and
declared here once, so a session-scoped one (the ZooKeeper server, Spark)
starts once per run whichever packages use it. Plain helpers are imported
from their modules: ``from tests.fixtures.waiting import wait_for``,
``from tests.fixtures.broker import BrokerProcess``.

After every test, ``no_leftovers`` stops the actors the test left running
and fails the test if any actor, thread or child process it started is
still there (fixtures of a wider scope started theirs before the test).

Message type ids used by test modules (each module registers its own test
messages; ids must not collide across the suite, which imports them all):
  9001-9099 tests/runtime/node_actors.py      9101-9199 tests/runtime/test_tracing.py
  9201-9299 tests/actors/test_timer_purgatory.py
  9301-9399 tests/actors/test_group_coordinator_shell.py
  9401-9499 tests/runtime/test_placement.py   9501-9599 tests/runtime/test_typed_rows.py
  9601-9699 tests/runtime/test_frame_limit.py  9701-9799 tests/actors/test_processor_bounds.py
  9801-9849 tests/actors/test_partition_shard_reads.py
  9850-9859 tests/actors/test_partition_shard_group_commit.py
  9711 tests/runtime/test_node_clock.py           9860-9869 tests/sim/test_world.py
  9901-9999 tests/wire/test_registry.py
"""

from __future__ import annotations

import fcntl
import os
import re
import tempfile
from collections.abc import Iterator

import pytest

from actors.runtime.clock import ManualClock
from actors.runtime.node import Node
from tests.fixtures import leaks
from tests.fixtures.broker import broker, fresh_broker, num_processes_params
from tests.fixtures.cluster import cluster_factory
from tests.fixtures.codec_server import codec_server
from tests.fixtures.netns import make_test_hosts
from tests.fixtures.pids import holds
from tests.fixtures.scratch import mem_tmp_path
from tests.fixtures.spark_cluster import spark_cluster
from tests.fixtures.sshd import ssh_host
from tests.fixtures.traces import real_traces, spark
from tests.fixtures.zookeeper import zk_connect, zk_ensemble, zookeeper_server

__all__ = [
    "broker",
    "cluster_factory",
    "codec_server",
    "fresh_broker",
    "holds",
    "make_test_hosts",
    "manual_clock",
    "manual_node",
    "mem_tmp_path",
    "no_leftovers",
    "node",
    "real_traces",
    "spark",
    "spark_cluster",
    "ssh_host",
    "zk_connect",
    "zk_ensemble",
    "zookeeper_server",
]


# num.processes = 0 (the default) stands for this many processes in every broker the suite
# starts, in this process or as a child: the CPU count of the machine otherwise. The tests
# that run at other counts set num.processes themselves (the broker fixture's mark).
os.environ.setdefault("ACTORLOG_NUM_PROCESSES", "1")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    num_processes_params(metafunc)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: two workers a core (most tests wait on processes, sockets and
    timeouts rather than compute), at most six."""
    return min(6, 2 * len(os.sched_getaffinity(0)))


# Under pytest-xdist (README: ``-n auto --dist loadgroup``) each worker is its own test run.
# Some tests share something a worker cannot make private, or costly to make twice, so
# each kind runs in one worker, one test after another: test hosts (the 198.18.0.0/24
# bridge in the root namespace and its addresses, made by fixtures or by `actorlog cluster
# up`), the analysis tests' Spark (a JVM per session is too much memory and start time to
# pay once per worker) and the bench entry tests' venv with a plain pip install. A group
# is named by the fixtures its tests use or the modules they are in. A test of those modules
# marked ``local_hosts`` (its hosts are via = "local", or it makes none) is no netns test:
# the netns group ran serially, as the run's tail, minutes of local clusters that need no
# bridge.
SHARED_GROUPS = {
    "netns": (("make_test_hosts", "ssh_host"),
              ("tests/hosts/", "tests/bench/test_chaos_bench.py")),
    # (test_trace_replication: its two tests share one traced cluster, made once per worker)
    "spark": (("spark", "spark_cluster", "real_traces"),
              ("tests/trace/test_trace_replication.py",)),
    # (one module-scoped venv with a plain pip install: built once, not once per worker)
    "plain_venv": (("plain",), ("tests/cli/test_bench_entry.py",)),
}


# Spark's JVMs in tests (the analysis tests' session, `trace analyze` and the bench run as
# subprocesses, the standalone cluster's executors: actors/trace/analyze.py reads this) run
# jobs of a few thousand records, where the C2 JIT and the parallel collector's threads
# cost more CPU than they save: C1 and the serial collector took one `trace analyze` of
# 2,000 records from 58 to 39 CPU seconds (the JVM's included). A value already set wins.
# xdist workers' port blocks (ACTORLOG_PORT_RANGE), below the kernel's ephemeral range
PORT_BLOCKS_START, PORT_BLOCK_SIZE, PORT_BLOCKS = 10000, 2500, 8
SPARK_TEST_JAVA_OPTS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"


def keep_bytecode() -> None:
    """With PYTHONDONTWRITEBYTECODE set, every broker, CLI and bench process a test starts
    compiles the project's sources again before it runs: half a CPU second of the two an
    `actorlog serve` takes to start, and the suite starts hundreds. Its children write and
    read their bytecode under a directory in the temporary dir instead
    (PYTHONPYCACHEPREFIX), so the source tree stays as clean as the setting keeps it."""
    if not os.environ.get("PYTHONDONTWRITEBYTECODE") or os.environ.get("PYTHONPYCACHEPREFIX"):
        return
    prefix = os.path.join(tempfile.gettempdir(), f"actorlog-pycache-{os.getuid()}")
    try:
        os.makedirs(prefix, mode=0o700, exist_ok=True)
        if os.stat(prefix).st_uid != os.getuid():  # not ours: compile as before
            return
    except OSError:
        return
    del os.environ["PYTHONDONTWRITEBYTECODE"]
    os.environ["PYTHONPYCACHEPREFIX"] = prefix


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault("ACTORLOG_SPARK_JAVA_OPTS", SPARK_TEST_JAVA_OPTS)
    keep_bytecode()
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:  # node names repeat across workers: a gateway socket directory each
        base = os.environ.get("ACTORLOG_IPC_DIR", f"/tmp/actorlog-ipc-{os.getuid()}")
        os.environ["ACTORLOG_IPC_DIR"] = f"{base}/{worker}"
        # and ports for the servers they start from a block of their own: drawn from one
        # shared range, two workers' picks met about once a run (a node's metrics port or
        # a ZooKeeper's taken by another worker's server before it bound it)
        index = int(worker[2:]) if worker[2:].isdigit() else 0
        low = PORT_BLOCKS_START + (index % PORT_BLOCKS) * PORT_BLOCK_SIZE
        os.environ["ACTORLOG_PORT_RANGE"] = f"{low}-{low + PORT_BLOCK_SIZE - 1}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    grouping = bool(os.environ.get("PYTEST_XDIST_WORKER")) and config.getvalue("loadgroup")
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        where = item.nodeid
        for group, (users, modules) in SHARED_GROUPS.items():
            if fixtures.intersection(users) or (where.startswith(modules) and not (
                    group == "netns" and item.get_closest_marker("local_hosts"))):
                item.add_marker(pytest.mark.xdist_group(group))
                if grouping:
                    group_node_id(item, group)
                break
        else:
            shared = shared_fixture_group(item)
            if shared is not None:
                item.add_marker(pytest.mark.xdist_group(shared))
                if grouping:
                    group_node_id(item, shared)


def shared_fixture_group(item: pytest.Item) -> str | None:
    """The tests that share a module- or class-scoped fixture (the ``broker``, a module's
    own brokers or PKI) run in one worker: loadgroup hands every other test out one at a
    time, so a module's tests went to every worker and each started the module's brokers
    again, up to four times the starts for the same tests. One group per instance of the
    fixtures (a module's processes1 and processes2 brokers are two groups, which may run
    side by side)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    scopes = {defs[-1].scope for defs in info.name2fixturedefs.values() if defs}
    if "module" in scopes or "package" in scopes:
        group = item.nodeid.split("::", 1)[0]
    elif "class" in scopes and "::" in item.nodeid.split("[", 1)[0]:
        group = item.nodeid.split("[", 1)[0].rsplit("::", 1)[0]
    else:
        return None
    callspec = getattr(item, "callspec", None)
    if callspec is not None:  # the params of wider-scoped fixtures pick their instance
        wide = [f"{name}={value}" for name, value in sorted(callspec.params.items(), key=str)
                if str(getattr(callspec._arg2scope.get(name), "value", "function"))
                in ("module", "package", "class")]
        if wide:
            group += "-" + "-".join(wide)
    # (loadgroup reads a test's group after its last "@", and only if no "]" follows)
    return re.sub(r"[^\w./:=-]", "_", group)


def group_node_id(item: pytest.Item, group: str) -> None:
    """What pytest-xdist's loadgroup does for a marked test, done so pytest 9 sees it: the
    scheduler reads a test's group from an "@group" suffix of its node id, and pytest 9
    builds node ids from ``Node._id`` (a NodeId), so xdist 3.8's suffix, written to the
    old ``_nodeid`` attribute, is lost and every group is ignored. Parsing keeps the
    whole string as the id, suffix included."""
    from _pytest.nodeid import coerce_node_id

    if "@" not in item.nodeid:
        item._id = coerce_node_id(f"{item.nodeid}@{group}")  # type: ignore[attr-defined]


@pytest.fixture(autouse=True)
def one_netns_test_at_a_time(request: pytest.FixtureRequest) -> Iterator[None]:
    """Tests on netns test hosts share the root namespace's bridge and 198.18.0.0/24: under
    xdist only one worker runs one at a time. The "netns" xdist group does that under
    ``--dist loadgroup`` (the default here); this lock keeps it so under any other
    ``--dist`` mode a user picks."""
    marks = [m.args[0] for m in request.node.iter_markers("xdist_group") if m.args]
    if "netns" not in marks or not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    path = os.path.join(tempfile.gettempdir(), f"actorlog-netns-{os.getuid()}.lock")
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


@pytest.fixture(autouse=True)
def no_leftovers() -> Iterator[None]:
    before = leaks.Snapshot.take()
    yield
    problems = leaks.check(before)
    if problems:
        pytest.fail("the test left things running:\n  " + "\n  ".join(problems), pytrace=False)


@pytest.fixture
def node() -> Iterator[Node]:
    """A started node named "t" on the system clock, shut down after the test."""
    n = Node("t").start()
    yield n
    n.shutdown(timeout=5)


@pytest.fixture
def manual_clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def manual_node(manual_clock: ManualClock) -> Iterator[Node]:
    """A started node named "t" whose actors all read ``manual_clock``.

    Time moves only when the test says so: ``manual_node.advance_clock(ms)``
    moves the clock, has every actor take a turn on the new time and waits
    until the messages that caused have been handled.
    """
    n = Node("t", clock=manual_clock).start()
    yield n
    n.shutdown(timeout=5)

"""`actorlog bench chaos`: the fault schedule, and a short real run whose counts are computed.

The run uses a spec of three nodes on this machine (via = "local", loopback
ports, the test ZooKeeper), so it needs no root; kill and pause are the
faults that work there. The checker itself is proven able to fail by
tests/bench/test_chaos_check.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from actors.hosts import netns
from actors.hosts.cluster import ClusterError, SupervisorGaveUp
from actors.metadata.zk_server import free_port
from bench import chaos
from bench.chaos import ChaosRun, Injected, Planned, Settings, plan_faults
from tests.fixtures.netns import free_test_address, skip_unless_namespaces
from tests.fixtures.pids import Check, HeldProcess, running

ROOT = Path(__file__).parents[2]


@pytest.mark.local_hosts
def test_the_schedule_is_seeded_bounded_and_healed_before_the_end() -> None:
    nodes = {"kill": [1, 2, 3], "pause": [1, 2, 3], "isolate": [2, 3], "netem": [2, 3]}
    plan = plan_faults(11, list(nodes), nodes, duration_s=600)
    assert plan == plan_faults(11, list(nodes), nodes, duration_s=600)
    assert plan != plan_faults(12, list(nodes), nodes, duration_s=600)
    assert 600 / 18 <= len(plan) <= 600 / 7
    assert {p.kind for p in plan} == set(nodes)
    assert all(p.node in (2, 3) for p in plan if p.kind in ("isolate", "netem"))
    ends = [p.at_s + p.hold_s for p in plan]
    assert all(end < 600 - 1 for end in ends)
    assert all(nxt.at_s > end for nxt, end in zip(plan[1:], ends, strict=False))  # one at a time
    assert plan_faults(1, ["isolate"], {"isolate": []}, duration_s=600) == []
    assert plan_faults(1, ["kill"], {"kill": [1]}, duration_s=5) == []


def _local_spec(tmp_path: Path, zk_connect: str, config: str = "") -> Path:
    """chaos.toml: three nodes on this machine (loopback ports, the test ZooKeeper)."""
    ports = [free_port() for _ in range(6)]
    nodes = "".join(
        f'[nodes.{i}]\nhost = "here"\nconfig = {{"listeners" = "127.0.0.1:{ports[2 * i - 2]}", '
        f'"actor.gateway.port" = {ports[2 * i - 1]}}}\n' for i in (1, 2, 3))
    spec = tmp_path / "chaos.toml"
    spec.write_text(f"""
[hosts.here]
via = "local"
[zookeeper]
connect = "{zk_connect}"
{nodes}
[config]
"default.replication.factor" = 3
"offsets.topic.num.partitions" = 3
"zookeeper.session.timeout.ms" = 4000
"controlled.shutdown.retry.backoff.ms" = 500
"trace.sample.ratio" = 0.0
{config}""")
    return spec


class Leaders(ChaosRun):
    """A run whose partitions' leaders are set by the test (no cluster runs: the faults'
    own steps are the test's too, each said in ``calls``)."""

    def __init__(self, s: Settings) -> None:
        super().__init__(s, say=lambda line: None)
        self.led: dict[int, int] = {}
        self.calls: list[str] = []

    def leaders(self, exclude: int | None = None) -> dict[int, int]:
        return dict(self.led)


def _unit_run(tmp_path: Path, partitions: int = 8) -> Leaders:
    spec = _local_spec(tmp_path, "127.0.0.1:1", '"num.processes" = 2\n')
    return Leaders(Settings(str(spec), 30, ["kill", "killproc"], 1, partitions=partitions,
                            topic="chaos-unit"))


def test_killproc_counts_the_partitions_led_once_every_process_serves(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The wait for every process of the node to serve may take long (up to 120 s): the
    partitions the killed process leads are read after it, not before."""
    run = _unit_run(tmp_path)
    run.led = dict.fromkeys(range(8), 2)               # node 1 leads none when the fault is due

    def serving(node: int, timeout_s: float) -> dict[int, int]:
        run.led = dict.fromkeys(range(8), 1)           # ... and all once it serves
        return {1: 4242}

    monkeypatch.setattr(run.cluster, "wait_processes_serving", serving)
    monkeypatch.setattr(run.cluster, "kill_process", lambda node, index: 4242)
    try:
        fault = run.inject(Planned("killproc", 1, 0.0, 1.0, pick=0))
    finally:
        run.close()
    mine = tuple(p for p in range(8) if run.process_of(1, p, 2) == 1)
    assert mine and len(mine) < 8, mine               # process 1 runs some shards, not all
    assert (fault.process, fault.pid, fault.led) == (1, 4242, mine)


@pytest.mark.parametrize(("kind", "heals"), [("killproc", 1), ("kill", 2)])
def test_a_failed_heal_of_killproc_is_not_waited_for_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, heals: int) -> None:
    """A killproc whose heal raised (up to 120 s of waiting for the supervisor's restart) is
    not healed again on the way out; a kill whose heal raised is (it starts the node)."""
    run = _unit_run(tmp_path)
    monkeypatch.setattr(run, "inject", lambda planned: Injected(planned.kind, planned.node, 0))

    def heal(fault: Injected) -> None:
        run.calls.append(f"heal {fault.kind}")
        raise ClusterError("not healed")

    monkeypatch.setattr(run, "heal", heal)
    try:
        with pytest.raises(ClusterError, match="not healed"):
            run.run_schedule([Planned(kind, 1, 0.0, 0.0)], time.monotonic(),
                             lambda: run.calls.append("clients stopped"))
    finally:
        run.close()
    assert run.calls == [f"heal {kind}", "clients stopped"] + [f"heal {kind}"] * (heals - 1)


@pytest.mark.parametrize("stops", [True, False])
def test_a_node_whose_supervisor_gave_up_is_started_again_once_it_is_gone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stops: bool) -> None:
    """A give-up seen at the deadline while the node still shuts down: started then, the
    node would be found running and left alone, to exit just after. Its processes are
    waited for (killed if they outlast the bound), and only then is it started again."""
    run = _unit_run(tmp_path)
    running = {"left": 3 if stops else 10 ** 6}        # node_processes calls it still runs

    def gave_up(node: int, index: int, pid: int, timeout_s: float) -> int:
        raise SupervisorGaveUp(node, index, "broker process 1 died 6 times within 60 s")

    def processes(node: int) -> dict[int, object]:
        running["left"] -= 1
        return {0: object()} if running["left"] >= 0 else {}

    def kill(node: int) -> None:
        run.calls.append("killed")
        running["left"] = 0

    monkeypatch.setattr(chaos, "NODE_STOP_TIMEOUT_S", 0.5)
    monkeypatch.setattr(run.cluster, "wait_process_restarted", gave_up)
    monkeypatch.setattr(run.cluster, "node_processes", processes)
    monkeypatch.setattr(run.cluster, "kill", kill)
    monkeypatch.setattr(run.cluster, "start_node", lambda node, started: run.calls.append(
        "started" + (" while it ran" if running["left"] > 0 else "")))
    monkeypatch.setattr(run.cluster, "wait_answering", lambda node, timeout_s: None)
    fault = Injected("killproc", 1, 0, process=1, pid=4242)
    try:
        run.heal(fault)
    finally:
        run.close()
    assert fault.gave_up == "broker process 1 died 6 times within 60 s"
    assert run.calls == (["started"] if stops else ["killed", "started"])


@pytest.mark.local_hosts
@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_short_chaos_run_reports_every_count(tmp_path: Path, zk_connect: str) -> None:
    spec = _local_spec(tmp_path, zk_connect)
    out = tmp_path / "chaos.json"
    data = tmp_path / "chaos.cluster" / "data"
    marks = {i: running(f"serve --config {data / f'node-{i}' / 'node.toml'} ") for i in (1, 2, 3)}
    with ExitStack() as holds:
        with open(tmp_path / "chaos.out", "w+") as stdout, \
                open(tmp_path / "chaos.err", "w+") as stderr:
            bench = subprocess.Popen(
                [sys.executable, "-m", "actors.cli", "bench", "chaos", "--spec", str(spec),
                 "--duration", "20", "--faults", "kill,pause", "--seed", "3", "--rate", "50",
                 "--json", str(out)],
                stdout=stdout, stderr=stderr, text=True, cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)})
            try:
                # each node held while it runs (tests/fixtures/pids.py): that down stopped it
                # is read from its pidfd, and the marker shown to match a node of this run
                up = {i: holds.enter_context(_hold_node(bench, data / f"node-{i}", marks[i]))
                      for i in (1, 2, 3)}
                bench.wait(timeout=600)
            finally:
                if bench.poll() is None:
                    bench.kill()
                    bench.wait()
            stdout.seek(0)
            stderr.seek(0)
            result = subprocess.CompletedProcess(bench.args, bench.returncode, stdout.read(),
                                                 stderr.read())
        assert result.returncode == 0, result.stdout + result.stderr
        # down stopped every node seen up (the chaos may have killed some before)
        assert not [i for i, node in up.items() if not node.exited()]
    doc = json.loads(out.read_text())
    assert doc["bench"] == "chaos" and doc["config"]["faults"] == ["kill", "pause"]
    r = doc["results"]
    assert r["seed"] == 3 and r["acked"] > 0 and r["read"] > 0
    for key in ("lost", "duplicated", "reordered", "moved", "skipped"):
        assert isinstance(r[key], int) and r[key] >= 0, key
    assert 0 < r["availability"] <= 1
    assert set(r["failover_ms"]) == {"min", "median", "max", "count"}
    assert r["faults_injected"] and r["faults_injected"][0]["kind"] in ("kill", "pause")
    assert "seed 3" in result.stdout and "availability" in result.stdout
    assert "taking cluster chaos down" in result.stdout
    for i in (1, 2, 3):  # and the last one of each node (a kill's restart): its pid file's
        pid_file = data / f"node-{i}" / "serve.pid"
        # no process runs that node's config (its pid alone may be another process's now)
        assert HeldProcess.take_if(int(pid_file.read_text()), marks[i]) is None


@pytest.mark.local_hosts
@pytest.mark.slow
@pytest.mark.multiprocess
def test_killproc_kills_one_process_of_a_node_and_its_supervisor_restarts_it(
        tmp_path: Path, zk_connect: str) -> None:
    """Nodes of two processes; seed 28 over 30 s: kill node 1 at 4.7 s, killproc on node 1 at
    13.1 s (once the restarted node has every process serving again), kill node 3 at
    23.3 s. The killed process is restarted by the node's own supervisor (its log says so),
    the node serves on, and every acknowledged record is read back."""
    spec = _local_spec(tmp_path, zk_connect, '"num.processes" = 2\n"min.insync.replicas" = 2\n')
    out = tmp_path / "chaos.json"
    data = tmp_path / "chaos.cluster" / "data"
    result = _run_chaos(spec, out, "--duration", "30", "--faults", "kill,killproc",
                        "--seed", "28")
    assert result.returncode == 0, result.stdout + result.stderr
    r = json.loads(out.read_text())["results"]
    assert [(f["kind"], f["node"]) for f in r["faults_injected"]] == [
        ("kill", 1), ("killproc", 1), ("kill", 3)], r["faults_injected"]
    fault = r["faults_injected"][1]
    assert fault["process"] == 1 and fault["gave_up"] == "", fault
    assert fault["restarted_pid"] not in (None, fault["pid"]) and fault["restart_ms"] > 0
    assert r["killproc"] == {"restarted": 1, "gave_up": [],
                             "restart_ms": [fault["restart_ms"]]}
    # the node's own word: its supervisor saw the process die and had the new one serve
    log = (data / "node-1" / "serve.log").read_text()
    assert f"broker process 1 (pid {fault['pid']}) exited with -9; restarting it" in log
    assert f"process 1 (pid {fault['restarted_pid']}) serves connections" in log
    assert r["acked"] > 0 and r["lost"] == 0 and r["read"] >= r["acked"], r
    assert "killproc: 1 process(es) restarted by their supervisor and serving again" in \
        result.stdout
    assert "taking cluster chaos down" in result.stdout


def _run_chaos(spec: Path, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``actorlog bench chaos`` on ``spec`` at 50 records/s a producer (JSON to ``out``),
    bounded at 900 s; its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "actors.cli", "bench", "chaos", "--spec", str(spec), *args,
         "--rate", "50", "--json", str(out)],
        capture_output=True, text=True, timeout=900, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)})


def _hold_node(bench: subprocess.Popen[str], node_dir: Path, mark: Check) -> HeldProcess:
    """The node of ``node_dir`` once it runs (by its pid file), while the bench runs."""
    deadline = time.monotonic() + 300
    while bench.poll() is None and time.monotonic() < deadline:
        try:
            pid = int((node_dir / "serve.pid").read_text())
        except (FileNotFoundError, ValueError):  # not written yet, or being written
            pid = 0
        held = HeldProcess.take_if(pid, mark) if pid > 0 else None
        if held is not None:
            return held
        time.sleep(0.05)
    raise AssertionError(f"{node_dir.name} never seen running (bench exit code "
                         f"{bench.poll()})")


@pytest.mark.slow
@pytest.mark.multiprocess
def test_network_faults_on_netns_hosts(tmp_path: Path) -> None:
    """isolate and netem (loss through nftables where the kernel has no netem qdisc)."""
    skip_unless_namespaces()
    addresses = [free_test_address() for _ in range(4)]
    hosts = "".join(f'[hosts.h{i}]\nvia = "netns"\naddress = "{a}"\n'
                    for i, a in enumerate(addresses))  # h0: ZooKeeper's own
    nodes = "".join(f'[nodes.{i}]\nhost = "h{i}"\n' for i in (1, 2, 3))
    name = f"nc{os.getpid()}"  # names its namespaces: unique against other checkouts' runs
    spec = tmp_path / f"{name}.toml"
    spec.write_text(f"""
{hosts}
[zookeeper]
hosts = ["h0"]
{nodes}
[config]
"default.replication.factor" = 3
"offsets.topic.num.partitions" = 3
"zookeeper.session.timeout.ms" = 4000
"trace.sample.ratio" = 0.0
""")
    out = tmp_path / "netchaos.json"
    # 25 s: seed 1's schedule is the same as in 30 s (isolate at 4.8 s for 7.2 s, netem at
    # 16.8 s for 6.8 s), healed before the end; less load after it
    result = _run_chaos(spec, out, "--duration", "25", "--faults", "isolate,netem",
                        "--seed", "1")
    assert result.returncode == 0, result.stdout + result.stderr
    r = json.loads(out.read_text())["results"]
    kinds = {f["kind"] for f in r["faults_injected"]}
    assert kinds == {"isolate", "netem"}, r["faults_injected"]
    assert r["acked"] > 0 and r["seed"] == 1
    for key in ("lost", "duplicated", "reordered", "moved", "skipped"):
        assert isinstance(r[key], int) and r[key] >= 0, key
    assert f"removed network namespace alog-{name}-h1" in result.stdout
    assert not {f"alog-{name}-h{i}" for i in (0, 1, 2, 3)} & netns.namespaces()

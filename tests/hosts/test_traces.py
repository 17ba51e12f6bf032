"""`actorlog cluster traces`: a node's trace files copied from its host, read by `trace`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from actors.hosts.runner import LocalRunner
from actors.hosts.spec import HostSpec
from actors.hosts.traces import TraceCopyError, copy_traces
from tests.hosts.helpers import two_local_nodes_spec, wait_until
from tests.hosts.test_cluster import NAME, cli, produce_acked, spec_file  # noqa: F401

# its nodes are via = "local" (no namespace, no bridge): not in the netns group (tests/conftest.py)
pytestmark = pytest.mark.local_hosts

ROOT = Path(__file__).parents[2]


def local_runner(data_dir: Path) -> LocalRunner:
    return LocalRunner(HostSpec(name="here", via="local", address="127.0.0.1",
                                data_dir=str(data_dir), actorlog="", python=""))


def test_copy_traces_through_a_local_runner(tmp_path: Path) -> None:
    source = tmp_path / "data" / "traces"
    (source / "sub").mkdir(parents=True)
    (source / "a.parquet").write_bytes(b"x" * 100)
    (source / "sub" / "b.parquet").write_bytes(b"y" * 20)
    dest = tmp_path / "out" / "node-1"
    (dest / "traces").mkdir(parents=True)
    (dest / "traces" / "stale.parquet").write_bytes(b"old")  # from an earlier copy
    runner = local_runner(tmp_path)
    got = copy_traces(runner, str(source), dest)
    assert (got.files, got.bytes, got.source) == (2, 120, f"here:{source}")
    assert (dest / "traces" / "a.parquet").read_bytes() == b"x" * 100
    assert (dest / "traces" / "sub" / "b.parquet").read_bytes() == b"y" * 20
    assert not (dest / "traces" / "stale.parquet").exists()
    with pytest.raises(TraceCopyError, match=rf"no trace dir at here:{tmp_path}/nowhere "):
        copy_traces(runner, str(tmp_path / "nowhere"), dest)


def trace_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "actors.cli", "trace", *args],
                          capture_output=True, text=True, timeout=60, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.multiprocess
def test_traces_of_two_local_nodes_are_copied_and_read(spec_file: Path,  # noqa: F811
                                                       zk_connect: str) -> None:
    spec, ports = two_local_nodes_spec(zk_connect, '"trace.sample.ratio" = 1.0')
    spec_file.write_text(spec)
    up = cli("up", "--spec", str(spec_file))
    assert up.returncode == 0, up.stdout + up.stderr
    produce_acked(f"127.0.0.1:{ports[0]},127.0.0.1:{ports[2]}", "traced",
                  [f"r{i}".encode() for i in range(5)])
    # each node's trace writer flushes on its own timer, after the answers
    data = spec_file.parent / f"{NAME}.cluster" / "data"
    for node in (1, 2):
        traces = data / f"node-{node}" / "traces"
        wait_until(lambda traces=traces: any(traces.rglob("*.parquet")), 30.0,
                   f"node {node}'s trace files")
    out = spec_file.parent / "fetched"
    got = cli("traces", "--spec", str(spec_file), "--out", str(out))
    assert got.returncode == 0, got.stdout + got.stderr
    for node in (1, 2):
        assert f"node {node}: " in got.stdout and f"to {out}/node-{node}" in got.stdout
        assert any((out / f"node-{node}" / "traces").rglob("*.parquet")), node
    assert f"actorlog trace analyze --dir {out}/node-1 --dir {out}/node-2 " in got.stdout
    listed = trace_cli("list", "--limit", "100000", "--dir", str(out / "node-1"),
                       str(out / "node-2"))
    assert listed.returncode == 0, listed.stderr
    assert "@node-1\n" in listed.stdout and "@node-2\n" in listed.stdout, listed.stdout[-2000:]
    wrong = cli("traces", "--spec", str(spec_file), "--out", str(out), "--node", "7")
    assert wrong.returncode == 2 and "not a node of the spec: 7" in wrong.stderr
    down = cli("down", "--spec", str(spec_file))
    assert down.returncode == 0, down.stderr
    # node 2's trace dir gone: one line for it, node 1 still copied, exit status 1
    (data / "node-2" / "traces").rename(data / "node-2" / "traces.moved")
    again = cli("traces", "--spec", str(spec_file), "--out", str(out))
    assert again.returncode == 1, again.stdout + again.stderr
    assert f"node 2: NOT copied: no trace dir at here:{data}/node-2/traces" in again.stdout
    assert f"to {out}/node-1" in again.stdout and "1 node(s) not copied" in again.stderr


def test_analyze_runs_on_the_copies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--analyze hands the copied node dirs to `trace analyze` (Spark itself stubbed out)."""
    from click.testing import CliRunner

    from actors import cluster_cli
    from actors.trace import analyze as trace_analyze

    spec = tmp_path / "c.toml"
    spec.write_text('[hosts.here]\nvia = "local"\n[zookeeper]\nconnect = "127.0.0.1:1"\n'
                    '[nodes.1]\nhost = "here"\n')
    traces = tmp_path / "c.cluster" / "data" / "node-1" / "traces"
    traces.mkdir(parents=True)
    (traces / "t.parquet").write_bytes(b"PAR1")
    calls: list[tuple[list[Path], Path]] = []

    def fake(dirs: list[Path], out: Path, **_: object) -> dict[str, object]:
        calls.append((dirs, out))
        return {"records": 0, "requests": 0, "incomplete_requests": 0, "violation_count": 0,
                "per_api_us": {}, "violations": [],
                "timings": {"prepare_s": 0.0, "spark_start_s": 0.0, "job_s": 0.0}}

    monkeypatch.setattr(trace_analyze, "require_extras", lambda: None)
    monkeypatch.setattr(trace_analyze, "analyze", fake)
    out = tmp_path / "out"
    result = CliRunner().invoke(cluster_cli.group, ["traces", "--spec", str(spec), "--out",
                                                    str(out), "--analyze"])
    assert result.exit_code == 0, result.output
    assert f"node 1: 1 file(s), 4 bytes from here:{traces} to {out}/node-1" in result.output
    assert calls == [([out / "node-1"], out / "report")]
    assert f"report: {out}/report/report.html" in result.output


def test_an_out_dir_that_cannot_be_made_is_one_line(tmp_path: Path) -> None:
    spec = tmp_path / "c.toml"
    spec.write_text('[hosts.here]\nvia = "local"\n[zookeeper]\nconnect = "127.0.0.1:1"\n'
                    '[nodes.1]\nhost = "here"\n')
    traces = tmp_path / "c.cluster" / "data" / "node-1" / "traces"
    traces.mkdir(parents=True)
    (traces / "t.parquet").write_bytes(b"PAR1")
    (tmp_path / "a-file").write_text("x")
    done = subprocess.run([sys.executable, "-m", "actors.cli", "cluster", "traces", "--spec",
                           str(spec), "--out", str(tmp_path / "a-file" / "out")],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip() == f"Error: cannot make --out {tmp_path}/a-file/out: Not a directory"

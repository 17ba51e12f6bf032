"""`actorlog bench` right after the README's plain install (`pip install -e .`, no extras).

A fresh venv gets the runtime install only; there `actorlog bench --help`
lists every benchmark, a benchmark whose libraries are missing says in one
line which pip command adds them, and the runtime-only benchmarks run.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from actors.cli.bench import BENCH_COMMANDS
from tests.fixtures.broker import BrokerProcess

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]


# session scope: its tests run in one xdist worker (tests/conftest.py's "plain_venv"
# group), but other modules' tests may run between them there, which ends a module fixture
@pytest.fixture(scope="session")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    env = tmp_path_factory.mktemp("plain") / "venv"
    venv.create(env, with_pip=True)
    subprocess.run([str(env / "bin" / "python"), "-m", "pip", "install", "-q", "-e", str(ROOT)],
                   check=True, capture_output=True, timeout=600)
    probe = subprocess.run([str(env / "bin" / "python"), "-c", "import confluent_kafka"],
                           capture_output=True)
    assert probe.returncode != 0  # the plain install has no bench extra
    return env / "bin"


def run(bin_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(bin_dir / "actorlog"), *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)


def test_bench_help_lists_every_benchmark_without_the_extras(plain: Path) -> None:
    proc = run(plain, "bench", "--help")
    assert proc.returncode == 0, proc.stderr
    for name in BENCH_COMMANDS:
        assert f"  {name} " in proc.stdout, name
    assert "needs the bench extra" in proc.stdout


def test_a_benchmark_without_its_libraries_names_the_pip_line(plain: Path) -> None:
    proc = run(plain, "bench", "produce", "--bootstrap", "127.0.0.1:9")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "confluent-kafka" in lines[0]
    assert f"{plain / 'python'} -m pip install -e '.[bench]'" in lines[0]


def test_runtime_benchmarks_run_on_the_plain_install(plain: Path, tmp_path: Path) -> None:
    out = tmp_path / "log.json"
    proc = run(plain, "bench", "log", "--total-mb", "1", "--segments", "5", "--random-reads",
               "10", "--repeat", "1", "--dir", str(tmp_path), "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert out.exists() and '"ratios"' in out.read_text()


def test_the_dev_install_has_every_benchmark() -> None:
    proc = subprocess.run([sys.executable, "-m", "actors.cli", "bench", "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "needs the" not in proc.stdout, proc.stdout


@pytest.mark.parametrize("load", ["produce", "consume", "e2e"])
def test_a_load_with_no_broker_there_is_one_line(load: str) -> None:
    """A bootstrap where nothing listens: one line and exit code 1 (a run-time condition),
    not librdkafka's retries and a traceback of its metadata timeout."""
    with socket.socket() as probe:  # a loopback port just free: nothing listens on it
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.run([sys.executable, "-m", "actors.cli", "bench", load, "--bootstrap",
                           f"127.0.0.1:{port}", "--duration", "1", "--no-progress"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert lines[0] == (f"Error: cannot reach a Kafka broker at 127.0.0.1:{port}; "
                        f"is it running? (--bootstrap HOST:PORT)")


def test_a_mistyped_bootstrap_is_one_line() -> None:
    """`--bootstrap foo` (no port) is a usage error in one line, not a ValueError's
    traceback."""
    proc = subprocess.run([sys.executable, "-m", "actors.cli", "bench", "produce",
                           "--bootstrap", "foo", "--duration", "1", "--no-progress"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "--bootstrap: expected HOST:PORT, got 'foo'" in lines[0]


def test_a_worker_error_is_one_line(broker: BrokerProcess) -> None:
    """A load whose worker fails (its producer refuses the config: idempotence needs
    acks=all; the parent's admin client takes it) is one line naming the error, exit
    code 1, not the worker's traceback."""
    proc = subprocess.run([sys.executable, "-m", "actors.cli", "bench", "produce",
                           "--bootstrap", broker.bootstrap, "--topic", "worker-error",
                           "--acks", "1", "-X", "enable.idempotence=true",
                           "--num-records", "10", "--no-progress"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert lines[0].startswith(f"Error: {broker.bootstrap}: the load failed: KafkaException"), \
        lines[0]
    assert "enable.idempotence" in lines[0]

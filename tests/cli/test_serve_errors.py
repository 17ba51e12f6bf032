"""Every user mistake with `actorlog serve` ends in one line that names the problem and the fix.

Each case runs the real command in a subprocess and checks: the exit code
(2 for a bad argument or setting, 1 for a condition found at run time), one
line on stderr starting with ``Error:``, no traceback, the words that name
the problem and the fix, and no data dir left behind.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Case:
    args: list[str]
    code: int
    words: list[str]
    setup: Callable[[Path], None] = field(default=lambda _p: None)
    as_nobody: bool = False  # root reads any file: the unreadable case runs as nobody


def _write(name: str, text: str | bytes, mode: int | None = None) -> Callable[[Path], None]:
    def setup(base: Path) -> None:
        path = base / name
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text)
        if mode is not None:
            path.chmod(mode)
    return setup


CASES: dict[str, Case] = {
    "port out of range": Case(
        ["--listen", "127.0.0.1:99999"], 2, ["port '99999'", "0 to 65535"]),
    "listen without a port": Case(
        ["--listen", "localhost"], 2, ["HOST:PORT", "127.0.0.1:9092"]),
    "IPv6 without brackets": Case(
        ["--listen", "::1:9092"], 2, ["brackets", "[::1]:9092"]),
    "address of no interface": Case(
        ["--listen", "192.0.2.1:0"], 2, ["no interface", "192.0.2.1", "127.0.0.1"]),
    "log level": Case(
        ["--log-level", "LOUD"], 2, ["LOUD", "not a log level", "INFO", "DEBUG"]),
    "data dir is a file": Case(
        ["--data-dir", "{base}/a-file"], 2, ["a-file", "is a file", "--data-dir"],
        setup=_write("a-file", "x")),
    "wildcard listener without advertised.listeners": Case(
        ["--listen", "0.0.0.0:0"], 2, ["0.0.0.0", "advertised.listeners", "clients can reach"]),
    "wildcard advertised.listeners": Case(
        ["--listen", "127.0.0.1:0", "--advertised-listeners", "0.0.0.0:9092"], 2,
        ["advertised.listeners", "0.0.0.0", "clients can reach"]),
    "trace sample out of range": Case(
        ["--trace-sample", "3"], 2, ["trace.sample.ratio", "out of range", "0.0 to 1.0"]),
    "metrics port not a number": Case(
        ["--metrics-port", "x"], 2, ["--metrics-port", "'x'", "actorlog serve --help"]),
    "unknown config key": Case(
        ["--config", "{base}/c.toml"], 2, ["num.io.thread'", "did you mean 'num.io.threads'"],
        setup=_write("c.toml", '"num.io.thread" = 3\n')),
    "config value of the wrong type": Case(
        ["--config", "{base}/c.toml"], 2, ["num.io.threads", "an integer", "'four'", "default 2"],
        setup=_write("c.toml", '"num.io.threads" = "four"\n')),
    "config value out of range": Case(
        ["--config", "{base}/c.toml"], 2, ["num.io.threads = 0", "out of range", "from 1"],
        setup=_write("c.toml", '"num.io.threads" = 0\n')),
    "retention of 0 from the hours": Case(
        ["--config", "{base}/c.toml"], 2,
        ["c.toml: log.retention.hours = 0", "delete every segment", "-1"],
        setup=_write("c.toml", '"log.retention.hours" = 0\n')),
    "retention of 0 from the minutes": Case(
        ["--config", "{base}/c.toml"], 2,
        ["c.toml: log.retention.minutes = 0", "delete every segment"],
        setup=_write("c.toml", '"log.retention.minutes" = 0\n"log.retention.hours" = 5\n')),
    "roll of 0 hours": Case(
        ["--config", "{base}/c.toml"], 2,
        ["c.toml: log.roll.hours = 0", "out of range", "from 1", "default 168"],
        setup=_write("c.toml", '"log.roll.hours" = 0\n')),
    "config choice": Case(
        ["--config", "{base}/c.toml"], 2,
        ["actor.threads", "'many'", "'single', 'shared', 'dedicated'"],
        setup=_write("c.toml", '"actor.threads" = "many"\n')),
    "failed authentication delay not below the idle time": Case(
        ["--config", "{base}/c.toml"], 2,
        ["connection.failed.authentication.delay.ms = 100", "less than",
         "connections.max.idle.ms = 100"],
        setup=_write("c.toml", '"connections.max.idle.ms" = 100\n')),
    "config not TOML": Case(
        ["--config", "{base}/c.toml"], 2, ["not valid TOML", "actorlog.example.toml"],
        setup=_write("c.toml", "this is = not toml\n")),
    "config not UTF-8": Case(
        ["--config", "{base}/c.toml"], 2, ["not valid TOML", "UTF-8"],
        setup=_write("c.toml", b'"node.name" = "\xff"\n')),
    "config missing": Case(
        ["--config", "{base}/none.toml"], 2, ["none.toml", "does not exist", "TOML file"]),
    "config is a directory": Case(
        ["--config", "{base}"], 2, ["is a directory", "TOML file"]),
    "config unreadable": Case(
        ["--config", "{base}/c.toml"], 2, ["cannot read", "permission denied", "chmod"],
        setup=_write("c.toml", '"num.io.threads" = 2\n', 0o000), as_nobody=True),
    "CURVE key file missing": Case(
        ["--config", "{base}/c.toml"], 2, ["none.key_secret does not exist",
                                           "actorlog keys new --out DIR"],
        setup=lambda base: _curve_config(base, base / "none.key_secret")),
    "CURVE secret key readable by others": Case(
        ["--config", "{base}/c.toml"], 2, ["node-1.key_secret", "may be read by others",
                                           "mode 0644", "chmod 600"],
        setup=lambda base: _curve_config(base, mode=0o644)),
    "CURVE without its keys dir": Case(
        ["--config", "{base}/c.toml"], 2, ["actor.curve.public.keys.dir is not set"],
        setup=lambda base: _curve_config(base, keys_dir="")),
}


def _curve_config(base: Path, secret: Path | None = None, mode: int = 0o600,
                  keys_dir: str | None = None) -> None:
    from actors.security.curve import make_node_keys
    public, made = make_node_keys(base / "keys", "node-1")
    made.chmod(mode)
    lines = [f'"actor.curve.secret.key.file" = "{secret or made}"\n']
    keys_dir = str(public.parent) if keys_dir is None else keys_dir
    if keys_dir:
        lines.append(f'"actor.curve.public.keys.dir" = "{keys_dir}"\n')
    (base / "c.toml").write_text("".join(lines))


def run_serve(args: list[str], as_nobody: bool = False) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "actors.cli", "serve", *args]
    if as_nobody and os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv: cannot make a file unreadable")
        argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60)


def check_one_line(proc: subprocess.CompletedProcess[str], code: int, words: list[str]) -> str:
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    line = lines[0]
    assert line.startswith("Error: "), line
    for word in words:
        assert word in line, (word, line)
    assert proc.returncode == code, (proc.returncode, line)
    return line


@pytest.mark.parametrize("name", list(CASES))
def test_a_user_mistake_gets_one_line(name: str, tmp_path: Path) -> None:
    case = CASES[name]
    base = tmp_path / "case"
    base.mkdir()
    base.chmod(0o755)
    tmp_path.chmod(0o755)
    case.setup(base)
    data_dir = base / "data"
    args = [a.replace("{base}", str(base)) for a in case.args]
    if "--data-dir" not in args:
        args += ["--data-dir", str(data_dir)]
    if "--listen" not in args:
        args += ["--listen", "127.0.0.1:0"]
    proc = run_serve(args, case.as_nobody)
    check_one_line(proc, case.code, case.words)
    assert not data_dir.exists()


def test_a_port_in_use_gets_one_line_and_leaves_no_data_dir(tmp_path: Path) -> None:
    data_dir = tmp_path / "new-data"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = run_serve(["--listen", f"127.0.0.1:{port}", "--data-dir", str(data_dir)])
    check_one_line(proc, 1, [f"127.0.0.1:{port}", "in use", "--listen",
                             "listeners in the config file or cluster spec"])
    assert not data_dir.exists()


def test_a_port_in_use_keeps_an_existing_data_dir_as_it_was(tmp_path: Path) -> None:
    data_dir = tmp_path / "old-data"
    data_dir.mkdir()
    (data_dir / "keep").write_text("x")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        proc = run_serve(["--listen", f"127.0.0.1:{taken.getsockname()[1]}",
                          "--data-dir", str(data_dir)])
    check_one_line(proc, 1, ["in use"])
    assert sorted(p.name for p in data_dir.iterdir()) == ["keep"]


def test_a_metrics_port_in_use_gets_one_line_and_leaves_no_data_dir(tmp_path: Path) -> None:
    """The metrics port is bound before the broker starts: nothing is made, nothing logged."""
    data_dir = tmp_path / "new-data"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = run_serve(["--listen", "127.0.0.1:0", "--data-dir", str(data_dir),
                          "--metrics-port", str(port)])
    check_one_line(proc, 1, [f"metrics on port {port}", "in use", "--metrics-port"])
    assert not data_dir.exists()


def _cluster_node_config(base: Path, zk_connect: str, listeners: str, gateway_port: int,
                         gateway_host: str = "127.0.0.1") -> Path:
    config = base / "node.toml"
    config.write_text(f'"zookeeper.connect" = "{zk_connect}"\n"node.id" = 7\n'
                      f'"listeners" = "{listeners}"\n"actor.gateway.host" = "{gateway_host}"\n'
                      f'"actor.gateway.port" = {gateway_port}\n')
    return config


def _registered(zk_connect: str) -> list[str]:
    from tests.fixtures.cluster_tools import ZooKeeperReader

    zk = ZooKeeperReader(zk_connect)
    try:
        return zk.children("/brokers/ids")
    finally:
        zk.close()


def test_a_gateway_port_of_its_own_listener_gets_one_line_and_no_registration(
        tmp_path: Path, zk_connect: str) -> None:
    """Its gateway failed to start and the node ran on, registered at its listener's
    address: the other nodes' links met a listener (a TLS one logged each attempt)."""
    first, second = free_tcp_ports(2)
    config = _cluster_node_config(
        tmp_path, zk_connect, f"PLAINTEXT://127.0.0.1:{first},INTERNAL://127.0.0.1:{second}",
        second)
    with config.open("a") as f:
        f.write('"listener.security.protocol.map" = "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT"\n')
    data_dir = tmp_path / "data"
    proc = run_serve(["--config", str(config), "--data-dir", str(data_dir)])
    check_one_line(proc, 2, [f"actor.gateway.port = {second}", "listener INTERNAL",
                             "a port of its own"])
    assert not data_dir.exists() and "7" not in _registered(zk_connect)


def test_a_gateway_port_in_use_gets_one_line_and_no_registration(
        tmp_path: Path, zk_connect: str) -> None:
    data_dir = tmp_path / "data"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = _cluster_node_config(tmp_path, zk_connect, "127.0.0.1:0", port)
        proc = run_serve(["--config", str(config), "--data-dir", str(data_dir)])
    check_one_line(proc, 1, [f"actor.gateway.port: cannot listen on 127.0.0.1:{port}",
                             "in use", "choose another actor.gateway.port"])
    assert not data_dir.exists() and "7" not in _registered(zk_connect)


def test_a_gateway_host_not_of_this_machine_gets_one_line_and_no_registration(
        tmp_path: Path, zk_connect: str) -> None:
    """A bind refused for another reason than a port in use was called "in use" (exit 1,
    'is another broker using it?'): it is the config's mistake. Only a bind is tried."""
    data_dir = tmp_path / "data"
    port = free_tcp_ports(1)[0]
    config = _cluster_node_config(tmp_path, zk_connect, "127.0.0.1:0", port, "198.18.0.250")
    proc = run_serve(["--config", str(config), "--data-dir", str(data_dir)])
    line = check_one_line(proc, 2, ["actor.gateway.host = 198.18.0.250",
                                    "no interface of this host has that address"])
    assert "in use" not in line
    assert not data_dir.exists() and "7" not in _registered(zk_connect)


def free_tcp_ports(count: int) -> list[int]:
    socks = [socket.socket() for _ in range(count)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def test_an_actor_whose_setup_fails_gets_one_error_line_naming_the_cause(
        tmp_path: Path) -> None:
    """The spawn's NodeError, no BrokerError, left serve with a traceback; the actor's
    own log line says it once, with no traceback for a refusal of the system."""
    data_dir = tmp_path / "data"
    (data_dir / "cleaner-offset-checkpoint").mkdir(parents=True)  # a file expected here
    proc = run_serve(["--listen", "127.0.0.1:0", "--data-dir", str(data_dir)])
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and proc.stderr.rstrip().endswith(errors[0]), proc.stderr
    assert "'log-cleaner' failed to start" in errors[0], errors[0]
    assert "Is a directory" in errors[0] and "cleaner-offset-checkpoint" in errors[0], errors[0]
    assert proc.returncode == 1, proc.stderr


@pytest.mark.parametrize(("text", "words"), [
    ("version=0\nbroker.id=one\ncluster.id=abc\n", ["broker.id='one' is not an integer"]),
    ("version=0\nbroker.id=1\n", ["has no cluster.id"]),
    # (in cluster.id an older actorlog's raw id: read so, tests/cluster/test_cluster_id_meta)
    ("version=0\nbroker.id=\\u12g4\ncluster.id=abc\n", ["malformed", "\\uXXXX"]),
])
def test_a_malformed_meta_properties_gets_one_line_naming_the_file(
        tmp_path: Path, text: str, words: list[str]) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "meta.properties").write_text(text)
    proc = run_serve(["--data-dir", str(data), "--listen", "127.0.0.1:0"])
    check_one_line(proc, 1, [str(data / "meta.properties"), *words])
    assert (data / "meta.properties").read_text() == text  # left as it was


def test_meta_properties_is_read_as_java_properties(tmp_path: Path) -> None:
    """The file as Kafka's tools write or an operator edits it (comments, ':' or blanks
    around the separator) reads as Java reads it; actorlog's own form reads as before."""
    from actors.broker import BrokerError, read_meta, read_or_create_meta

    (tmp_path / "meta.properties").write_text(
        "#\n#Mon Nov 30 12:00:00 UTC 2026\n! edited by hand\ncluster.id : Zx8aQ-1\n"
        "broker.id = 3\nversion=0\n")
    assert read_meta(tmp_path, 3) == "Zx8aQ-1"
    with pytest.raises(BrokerError, match="belongs to broker 3, this is broker 4"):
        read_meta(tmp_path, 4)
    own = tmp_path / "own"
    own.mkdir()
    made = read_or_create_meta(own, 7)
    assert (own / "meta.properties").read_text() == f"version=0\nbroker.id=7\ncluster.id={made}\n"
    assert read_meta(own, 7) == made


@pytest.mark.parametrize("cluster_id", ["Zx8aQ-1", "clüster-\u00e9", "a\\b\\u0041", " lead:=#!",
                                        "\U0001f600 tab\tend "])
def test_meta_properties_round_trips_any_cluster_id(tmp_path: Path, cluster_id: str) -> None:
    """A ZooKeeper-mode broker takes the cluster id from ZooKeeper's /cluster/id, any
    string: written as Java's Properties.store writes it (ASCII, escaped), it reads back
    the same, so a restart is not refused as 'belongs to cluster ...'."""
    from actors.broker import read_meta, read_or_create_meta
    from actors.runtime.properties import read_properties

    assert read_or_create_meta(tmp_path, 5, cluster_id) == cluster_id
    text = (tmp_path / "meta.properties").read_bytes().decode("ascii")
    assert read_meta(tmp_path, 5) == cluster_id
    assert read_or_create_meta(tmp_path, 5, "other") == cluster_id  # found, not rewritten
    assert read_properties(text)["cluster.id"] == cluster_id


def test_meta_properties_is_written_as_java_writes_it() -> None:
    from actors.runtime.properties import write_properties

    assert write_properties({"cluster.id": "cl\u00fc\\ster x", "a b:c": " v#!=\n"}) == (
        "cluster.id=cl\\u00FC\\\\ster x\n" "a\\ b\\:c=\\ v\\#\\!\\=\\n\n")


def serve_once(argv: list[str]) -> None:
    """`serve` with ``argv`` starts (says it listens) and a SIGTERM stops it with exit 0."""
    import signal as signals

    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)
    try:
        assert proc.stdout is not None
        assert "actorlog listening on" in proc.stdout.readline()
        proc.send_signal(signals.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("signum", [15, 2])
def test_a_signal_before_the_start_stops_serve_cleanly(tmp_path: Path, signum: int) -> None:
    """SIGTERM/SIGINT while `serve` still reads its settings (here held there: the config
    file is a FIFO this test writes after the signal), before Broker.start: exit 0 with one
    line, and the data dir starts after, nothing left holding it (the default action
    killed it silently: -15; SIGINT: a KeyboardInterrupt traceback)."""
    import signal as signals

    fifo = tmp_path / "broker.toml"
    os.mkfifo(fifo)
    data = tmp_path / "data"
    argv = [sys.executable, "-m", "actors.cli", "serve", "--listen", "127.0.0.1:0",
            "--data-dir", str(data), "--config", str(fifo)]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        with open(fifo, "w") as writer:  # returns once serve opened it to read
            proc.send_signal(signum)
            writer.write('"num.processes" = 2\n')
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    name = signals.Signals(signum).name
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and f"got {name} while starting; stopped" in lines[0], err
    assert "listening" not in out
    # nothing left running from this data dir, and it starts (and stops) after
    fifo.unlink()
    fifo.write_text('"num.processes" = 2\n')
    serve_once(argv)


def test_a_signal_after_a_failed_start_stops_serve(tmp_path: Path) -> None:
    """A start that failed (its port in use) puts back the handlers serve had before its
    own early ones: a SIGTERM while it still writes its error (held here: its stderr is a
    full pipe) kills it as the default action does (-15), not only noted, never a serve
    that a SIGKILL alone ends."""
    import signal as signals
    import time

    rest = b""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    try:
        while True:
            os.write(write_end, b"x" * 4096)
    except BlockingIOError:
        pass
    os.set_blocking(write_end, True)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = [sys.executable, "-m", "actors.cli", "serve", "--listen", f"127.0.0.1:{port}",
                "--data-dir", str(tmp_path / "data"), "--log-level", "ERROR"]
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=write_end)
        os.close(write_end)
        try:
            deadline = time.monotonic() + 60
            wchan = Path(f"/proc/{proc.pid}/wchan")
            while proc.poll() is None and "pipe" not in wchan.read_text() \
                    and time.monotonic() < deadline:
                time.sleep(0.05)  # until its failed start writes the error (blocked)
            assert proc.poll() is None, "serve ended before writing its error"
            assert "pipe" in wchan.read_text(), "serve never wrote its error"
            proc.send_signal(signals.SIGTERM)
            with os.fdopen(read_end, "rb") as reader:  # lets it write, should it still run
                rest = reader.read()  # (to its end: it ends either way)
                proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == -signals.SIGTERM, (proc.returncode, rest[-300:])


def test_a_signal_while_the_node_starts_is_one_line(tmp_path: Path) -> None:
    """SIGTERM while the node starts (num.processes 2: process 1 holds before it takes
    connections, by the test hook, so process 0 surely still waits for it; the signal
    comes once process 1 holds and the group coordinator has logged its load): the
    start's cleanup stops the node and serve says so in one line, the whole output after
    the signal (it also logged "node ... stopped"). The data dir served once before, so
    this start creates nothing."""
    import select
    import signal as signals
    import time

    from actors.processes import TEST_HOLD_READY_ENV

    config = tmp_path / "broker.toml"
    config.write_text('"num.processes" = 2\n"offsets.topic.num.partitions" = 1\n')
    argv = [sys.executable, "-m", "actors.cli", "serve", "--listen", "127.0.0.1:0",
            "--data-dir", str(tmp_path / "data"), "--config", str(config)]
    serve_once(argv)
    release = tmp_path / "release-ready"
    held = b"holds its start until"
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, TEST_HOLD_READY_ENV: str(release)})
    before = b""
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline and not (
                b"loaded 0 group(s)" in before and held in before):
            if select.select([proc.stderr], [], [], 0.01)[0]:  # until both: what it logged
                before += os.read(proc.stderr.fileno(), 65536)
        assert proc.poll() is None and b"loaded 0 group(s)" in before, before
        assert held in before, before  # process 1 holds: process 0 waits for its ready line
        proc.send_signal(signals.SIGTERM)
        out, after = proc.communicate(timeout=60)
    finally:
        release.touch()  # a process 1 still held goes on (and ends with its parent)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, before + after
    assert out == b"", out  # never listened
    lines = after.decode().splitlines()
    assert len(lines) == 1 and lines[0].endswith("got SIGTERM while starting; stopped"), after

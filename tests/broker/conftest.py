"""A real broker process per test module (or per test where a test kills it)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class BrokerProcess:
    """`actorlog serve` in a child process, on a free loopback port."""

    def __init__(self, data_dir: Path, port: int | None = None, config: dict | None = None,
                 log_name: str = "broker.log", host: str = "127.0.0.1",
                 extra_args: tuple[str, ...] = (), listen: str | None = None) -> None:
        self.data_dir = data_dir
        self.host = host
        self.extra_args = extra_args
        self.port = port or free_port(host)
        self.listen = listen or self.bootstrap
        self.config = config or {}
        self.log_path = data_dir.parent / log_name
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> BrokerProcess:
        args = [sys.executable, "-m", "actors.cli", "serve", "--listen", self.listen,
                "--data-dir", str(self.data_dir), "--log-level", "DEBUG", *self.extra_args]
        if self.config:
            cfg = self.data_dir.parent / f"config-{self.port}.toml"
            cfg.write_text("".join(f'"{k}" = {v!r}\n'.replace("'", '"') if isinstance(v, str)
                                   else f'"{k}" = {str(v).lower() if isinstance(v, bool) else v}\n'
                                   for k, v in self.config.items()))
            args += ["--config", str(cfg)]
        log = open(self.log_path, "ab")
        start_at = log.tell()
        self.proc = subprocess.Popen(args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.log()}")
            # The port is bound before the logs are opened: ready is the broker's own line.
            if "listening on" in self.log()[start_at:]:
                with socket.create_connection((self.host, self.port), timeout=5):
                    return self
            time.sleep(0.05)
        raise RuntimeError(f"broker did not listen within {timeout} s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("broker")
    b = BrokerProcess(base / "data").start()
    yield b
    code = b.stop()
    assert code == 0, b.log()[-3000:]


@pytest.fixture
def fresh_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "data").start()
    yield b
    if b.proc is not None and b.proc.poll() is None:
        b.stop()

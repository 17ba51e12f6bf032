"""A raw Kafka client for broker tests: kafka-python's own protocol classes over a socket.

Requests are built and encoded by `kafka.protocol` exactly as kafka-python's
connection does (`KafkaProtocol.send_request`), so a test controls every
field (correlation ids, pipelining, a batch sent twice) and reads each
response in the order the broker wrote it. Record batches come from
`kafka.record` (magic 2), with producer id, epoch and sequence when asked.
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

from kafka.protocol.parser import KafkaProtocol
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from tests.fixtures.waiting import wait_for
from wire import kafka_codec as kc

PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
CREATE_TOPICS, DELETE_TOPICS, INIT_PRODUCER_ID, DESCRIBE_CONFIGS = 19, 20, 22, 32
API_VERSIONS = 18
DESCRIBE_TXNS = 65


def build(api_key: int, version: int, values: dict[str, Any]) -> Any:
    """A request object of kafka.protocol built with its own constructors."""
    cls = kc.request_class(api_key, version)
    return _to_library(cls._struct, cls, values, version)


def _to_library(field_struct: Any, data_class: Any, values: dict[str, Any], version: int) -> Any:
    kwargs: dict[str, Any] = {}
    for name, value in values.items():
        field = field_struct.fields[name]
        if field.is_struct_array() and value is not None:
            value = [_to_library(field.array_of, field.data_class, v, version) for v in value]
        elif field.is_struct() and value is not None:
            value = _to_library(field, field.data_class, value, version)
        kwargs[name] = value
    if field_struct is getattr(data_class, "_struct", None):
        kwargs["version"] = version
    return data_class(**kwargs)


def record_batch(
    records: list[tuple[bytes | None, bytes | None]],
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    timestamp_ms: int | None = None,
    compression: int = 0,
    headers: list[tuple[str, bytes]] | None = None,
) -> bytes:
    """One magic-2 batch of (key, value) records."""
    builder = DefaultRecordBatchBuilder(2, compression, False, producer_id, producer_epoch,
                                        base_sequence, 1 << 30)
    ts = timestamp_ms if timestamp_ms is not None else int(time.time() * 1000)
    for i, (key, value) in enumerate(records):
        builder.append(i, ts, key, value, headers or [])
    return bytes(builder.build())


def read_batches(data: bytes) -> list[DefaultRecordBatch]:
    """The batches of a Fetch response's records bytes (a partial last one is skipped)."""
    out = []
    pos = 0
    while len(data) - pos >= 61:
        (length,) = struct.unpack_from(">i", data, pos + 8)
        end = pos + 12 + length
        if end > len(data):
            break
        out.append(DefaultRecordBatch(bytes(data[pos:end])))
        pos = end
    return out


def read_records(data: bytes) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record in a Fetch response's records bytes."""
    return [(r.offset, r.key, r.value) for batch in read_batches(data) for r in batch]


class RawClient:
    """One connection; `send` pipelines, `recv` reads the next response."""

    def __init__(self, port: int, client_id: str = "raw-test", timeout: float = 15.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.protocol = KafkaProtocol(client_id=client_id)
        self.ready: list[tuple[int, Any]] = []

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send(self, api_key: int, version: int, values: dict[str, Any]) -> int:
        """Encode and write one request; its correlation id."""
        request = build(api_key, version, values)
        correlation_id = self.protocol.send_request(request)
        self.sock.sendall(bytes(self.protocol.send_bytes()))
        return int(correlation_id)

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv(self) -> tuple[int, Any]:
        """The next response as (correlation id, response object)."""
        while not self.ready:
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionError("broker closed the connection")
            self.ready.extend(self.protocol.receive_bytes(data))
        return self.ready.pop(0)

    def call(self, api_key: int, version: int, values: dict[str, Any]) -> Any:
        correlation_id = self.send(api_key, version, values)
        got, response = self.recv()
        assert got == correlation_id
        return response

    def is_closed_by_peer(self, timeout: float = 10.0) -> bool:
        """True when the broker closes this connection (EOF or reset) within timeout."""
        self.sock.settimeout(timeout)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    # ---------------------------------------------------------------- helpers
    def create_topic(self, name: str, partitions: int, replication_factor: int = 1,
                     configs: dict[str, str | None] | None = None) -> int:
        response = self.call(CREATE_TOPICS, 7, {
            "topics": [{"name": name, "num_partitions": partitions,
                        "replication_factor": replication_factor, "assignments": [],
                        "configs": [{"name": k, "value": v}
                                    for k, v in (configs or {}).items()]}],
            "timeout_ms": 10_000, "validate_only": False,
        })
        return int(response.topics[0].error_code)

    def produce(self, topic: str, partition: int, batch: bytes, acks: int = -1,
                version: int = 9, timeout_ms: int = 10_000) -> Any:
        """The partition response of a one-partition Produce."""
        response = self.call(PRODUCE, version, produce_values(topic, partition, batch, acks,
                                                              timeout_ms))
        return response.responses[0].partition_responses[0]

    def fetch(self, topic: str, partition: int, offset: int, *, max_wait_ms: int = 0,
              min_bytes: int = 0, max_bytes: int = 1 << 20, version: int = 11) -> Any:
        """The partition response of a one-partition Fetch."""
        response = self.call(FETCH, version, fetch_values(
            topic, partition, offset, max_wait_ms=max_wait_ms, min_bytes=min_bytes,
            max_bytes=max_bytes))
        return response.responses[0].partitions[0]

    def list_offset(self, topic: str, partition: int, timestamp: int) -> Any:
        response = self.call(LIST_OFFSETS, 7, {
            "replica_id": -1, "isolation_level": 0,
            "topics": [{"name": topic, "partitions": [
                {"partition_index": partition, "current_leader_epoch": -1,
                 "timestamp": timestamp}]}],
        })
        return response.topics[0].partitions[0]


def produce_values(topic: str, partition: int, batch: bytes, acks: int = -1,
                   timeout_ms: int = 10_000) -> dict[str, Any]:
    return {"transactional_id": None, "acks": acks, "timeout_ms": timeout_ms,
            "topic_data": [{"name": topic,
                            "partition_data": [{"index": partition, "records": batch}]}]}


def fetch_values(topic: str, partition: int, offset: int, *, max_wait_ms: int = 0,
                 min_bytes: int = 0, max_bytes: int = 1 << 20) -> dict[str, Any]:
    return {
        "replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes,
        "max_bytes": max_bytes, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [
            {"partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
             "last_fetched_epoch": -1, "log_start_offset": -1,
             "partition_max_bytes": max_bytes}]}],
        "forgotten_topics_data": [], "rack_id": "",
    }


def wait_for_log(broker: Any, text: str, timeout: float = 30.0, count: int = 1) -> str:
    """The broker's log once it holds `text` `count` times (it is written asynchronously)."""
    deadline = time.monotonic() + timeout
    while True:
        log = broker.log()
        if log.count(text) >= count or time.monotonic() > deadline:
            return log
        time.sleep(0.05)


def wait_complete(port: int, txn_id: str, state: str = "CompleteCommit") -> None:
    """Until the broker at ``port`` (the coordinator of ``txn_id``) says ``state``:
    EndTxn is answered once the commit is decided (PrepareCommit written, as in Kafka) and
    the markers are written after that answer, so a read_committed read right after
    commit_transaction may stop at the last stable offset, before its records."""
    with RawClient(port) as raw:
        def reached() -> bool:
            reply = raw.call(DESCRIBE_TXNS, 0, {"transactional_ids": [txn_id]})
            return bool(reply.transaction_states[0].transaction_state == state)

        wait_for(reached, f"{txn_id} in {state} (its markers written)")

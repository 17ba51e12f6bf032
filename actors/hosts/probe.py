"""Asking a node, through the Kafka protocol, whether it answers and what it knows.

One short connection per question, TCP or, to an SSL or SASL_SSL listener, TLS with
the spec's client_config: ApiVersions (does the listener answer Kafka requests at
all) and Metadata v1 (brokers, controller, partitions with their leader, replicas
and ISR). The requests are kafka-python's own protocol classes, the same bytes a
Kafka client sends.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
from dataclasses import dataclass
from typing import Any

from kafka.errors import KafkaError
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.parser import KafkaProtocol

from actors.hosts.node_config import parse_listener


class ProbeError(RuntimeError):
    """The node did not answer (refused, timed out, closed, or an error code)."""


@dataclass(frozen=True)
class PartitionInfo:
    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]

    @property
    def offline(self) -> bool:
        return self.leader < 0

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)


@dataclass(frozen=True)
class MetadataInfo:
    brokers: dict[int, str]  # id -> host:port
    controller_id: int
    cluster_id: str | None
    partitions: tuple[PartitionInfo, ...]


def _call(address: str, request: Any, timeout_s: float,
          tls: ssl.SSLContext | None = None) -> Any:
    host, port = parse_listener(address)
    protocol = KafkaProtocol(client_id="actorlog-cluster-status")
    try:
        with contextlib.ExitStack() as stack:
            sock = stack.enter_context(socket.create_connection((host, port), timeout=timeout_s))
            sock.settimeout(timeout_s)
            if tls is not None:  # an SSL or SASL_SSL listener, with the spec's client_config
                sock = stack.enter_context(tls.wrap_socket(sock, server_hostname=host))
            protocol.send_request(request)
            sock.sendall(bytes(protocol.send_bytes()))
            while True:
                data = sock.recv(1 << 20)
                if not data:
                    raise ProbeError(f"{address} closed the connection")
                try:
                    responses = protocol.receive_bytes(data)
                except KafkaError as exc:  # something else listens there (HTTP, say)
                    raise ProbeError(f"{address} does not speak the Kafka protocol "
                                     f"({type(exc).__name__})") from None
                if responses:
                    return responses[0][1]
    except TimeoutError:
        raise ProbeError(f"{address} did not answer within {timeout_s:g} s") from None
    except ssl.SSLError as exc:  # before OSError, of which it is one
        # a certificate refused says why (e.g. "IP address mismatch, certificate is not
        # valid for '127.0.0.2'."), where reason is only CERTIFICATE_VERIFY_FAILED
        why = getattr(exc, "verify_message", None) or exc.reason or exc
        raise ProbeError(f"{address}: TLS: {why}") from None
    except OSError as exc:
        raise ProbeError(f"{address}: {exc.strerror or exc}") from None


def api_versions(address: str, timeout_s: float = 2.0,
                 tls: ssl.SSLContext | None = None) -> int:
    """The number of APIs the node serves; ProbeError if it does not answer Kafka requests."""
    response = _call(address, ApiVersionsRequest[0](), timeout_s, tls)
    if response.error_code != 0:
        raise ProbeError(f"{address}: ApiVersions error code {response.error_code}")
    return len(response.api_keys)


def metadata(address: str, timeout_s: float = 2.0, topics: list[str] | None = None,
             tls: ssl.SSLContext | None = None) -> MetadataInfo:
    """Metadata v1 for ``topics`` (None: every topic; [] none: brokers and controller only),
    without creating any."""
    response = _call(address, MetadataRequest[1](topics=topics), timeout_s, tls)
    brokers = {b.node_id: f"{b.host}:{b.port}" for b in response.brokers}
    partitions = tuple(
        PartitionInfo(t.name, p.partition_index, p.leader_id, tuple(p.replica_nodes),
                      tuple(p.isr_nodes))
        for t in response.topics if t.error_code == 0
        for p in t.partitions
    )
    return MetadataInfo(brokers, response.controller_id, response.cluster_id, partitions)

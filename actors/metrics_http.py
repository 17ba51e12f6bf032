"""The Prometheus endpoint of a broker (``--metrics-port``): ``GET /metrics``.

A scrape adds the node's counters to gauges asked from the actors that own
the state (actors/metrics.py lists every family). An actor that does not
answer within a second leaves its gauges out of that scrape (logged), it does
not fail it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from loguru import logger

from actors.metrics import Sample, render
from actors.runtime.address import Address
from wire.broker_messages import GetGroupGauges, GetStats

ASK_TIMEOUT_S = 1.0
_GET_STATS = GetStats()  # immutable (a NamedTuple of no fields): one for every ask


def _ask(node: Any, address: Address, msg: Any = _GET_STATS) -> dict[str, Any] | None:
    try:
        answer: dict[str, Any] = node.ask(address, msg, timeout=ASK_TIMEOUT_S)
    except Exception as exc:  # a busy or stopped actor: its gauges wait for the next scrape
        logger.debug("metrics: no stats from {}: {}", address, exc)
        return None
    return answer


def gauges(broker: Any) -> list[Sample]:
    """Every gauge of a running broker, asked from the actors that own the numbers."""
    node, topo = broker.node, broker.topology
    out: list[Sample] = []

    def add(name: str, value: float, **labels: Any) -> None:
        out.append((name, [(k, str(v)) for k, v in labels.items()], value))

    # partitions (the shards)
    high_watermarks: dict[tuple[str, int], int] = {}
    hosted = leaders = under = offline = pending_deletes = 0
    for i in range(topo.num_shards):
        stats = _ask(node, topo.shard(i))
        pending_deletes += (stats or {}).get("pending_deletes", 0)
        for row in (stats or {}).get("metrics", []):
            topic, partition, size, start, end, hw, leads, short, no_leader = row
            high_watermarks[(topic, partition)] = hw
            hosted += 1
            leaders += bool(leads)
            under += bool(short)
            offline += bool(no_leader)
            add("log_size_bytes", size, topic=topic, partition=partition)
            add("log_start_offset", start, topic=topic, partition=partition)
            add("log_end_offset", end, topic=topic, partition=partition)
            add("high_watermark", hw, topic=topic, partition=partition)
    add("partitions", hosted)
    add("leader_partitions", leaders)
    add("under_replicated_partitions", under)
    add("offline_partitions", offline)
    # consumer groups: committed offsets from the coordinators, against the HW; the groups
    # counted by each (those without a commit too), not described one by one
    groups = 0
    for i in range(topo.num_coordinators):
        stats = _ask(node, topo.coordinator(i), GetGroupGauges()) or {}
        groups += stats.get("groups", 0)
        for group, topic, partition, committed in stats.get("committed", []):
            hw = high_watermarks.get((topic, partition))
            if hw is not None and committed >= 0:
                add("consumer_group_lag", max(0, hw - committed), group=group, topic=topic,
                    partition=partition)
    add("consumer_groups", groups)
    # connections
    listener = f"{broker.host}:{broker.port}"
    acceptor = _ask(node, topo.acceptor)
    if acceptor is not None:
        add("connections", acceptor.get("open", 0), listener=listener)
        add("connections_accepted_total", acceptor.get("accepted", 0), listener=listener)
        for process, count in enumerate(acceptor.get("by_process", ())):
            add("process_connections", count, listener=listener, process=str(process))
        if "handoff_busy" in acceptor:
            add("connections_handed_busy_total", acceptor["handoff_busy"], listener=listener)
    # purgatory
    # (a DeleteRecords waits in its leader's shard: Kafka's DeleteRecords purgatory)
    kinds = {"produce": 0, "fetch": 0, "delete_records": pending_deletes}
    expirations = 0
    for i in range(topo.num_purgatories):
        stats = _ask(node, topo.purgatory(i)) or {}
        for kind, count in stats.get("by_kind", {}).items():
            kinds[kind] = kinds.get(kind, 0) + count
        expirations += stats.get("expirations", 0)
    for kind, count in kinds.items():
        add("purgatory_size", count, kind=kind)
    add("purgatory_expirations_total", expirations)
    # replica fetchers (the running ones): bytes fetched, the largest answer
    for name, actor in sorted(node.actors.items()):
        if name.startswith("replica-fetcher-") and not actor.actor_stopped.is_set():
            stats = _ask(node, Address(node.name, name)) or {}
            add("replica_fetcher_bytes_total", stats.get("bytes_fetched", 0), fetcher=name)
            add("replica_fetcher_largest_response_bytes",
                stats.get("largest_response_bytes", 0), fetcher=name)
    # the log cleaner
    if "log-cleaner" in node.actors:
        stats = _ask(node, topo.log_cleaner) or {}
        add("log_cleaner_passes_total", stats.get("passes", 0))
        add("log_cleaner_bytes_read_total", stats.get("bytes_read", 0))
        add("log_cleaner_bytes_written_total", stats.get("bytes_written", 0))
        add("log_cleaner_max_dirty_ratio", stats.get("last_dirty_ratio", 0.0))
    # actors: read from their fields (each written by its own thread only)
    for name, actor in sorted(node.actors.items()):
        add("actor_mailbox_depth", node.mailbox_depth(name), actor=name)
        add("actor_messages_handled_total", actor.messages_handled, actor=name)
        add("actor_running", 0 if actor.actor_stopped.is_set() else 1, actor=name)
        add("actor_handle_seconds_sum", actor.handler_ns / 1e9, actor=name)
        add("actor_handle_seconds_count", actor.messages_handled, actor=name)
    add("actors_running", sum(1 for a in list(node.actors.values())
                              if not a.actor_stopped.is_set()))
    add("dead_letters_total", node.dead_letters.total)
    return out


def scrape(broker: Any) -> str:
    """The text of one scrape of ``broker``."""
    samples = gauges(broker)
    return render(broker.node.metrics.snapshot(), samples)


def serve_metrics(host: str, port: int, text: Callable[[], str]) -> ThreadingHTTPServer:
    return start_metrics(bind_metrics(host, port, text))


def start_metrics(server: ThreadingHTTPServer) -> ThreadingHTTPServer:
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    return server


def bind_metrics(host: str, port: int, text: Callable[[], str]) -> ThreadingHTTPServer:
    """The metrics server bound to its port (OSError if it cannot be), not yet serving."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path not in ("/metrics", "/"):
                self.send_error(404)
                return
            try:
                body = text().encode()
            except Exception:
                logger.exception("metrics: the scrape failed")
                self.send_error(500)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: Any) -> None:
            pass

    return ThreadingHTTPServer((host, port), Handler)

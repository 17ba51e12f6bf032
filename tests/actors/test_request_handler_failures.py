"""A follower's ReplicaFetch whose handling raises on the leader's RequestHandler is
answered in error, as an abandoned one (UNKNOWN_SERVER_ERROR on each partition: the
fetcher backs them off, then goes on), not left to the follower's request timeout.

A real node runs a real RequestHandler; a Fetcher actor stands for the follower's
ReplicaFetcher. No ReplicaFetch found makes the API raise, so its function is replaced
by one that raises, as a bug would (the planted fault of tests/broker/test_api_failures.py,
in-process).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from actors import request_handler
from actors.apis.base import HandlerContext
from actors.core.topic_store import TopicEntry
from actors.request_handler import RequestHandler
from actors.runtime.actor import Actor, handles
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.topology import Topology
from tests.fixtures.waiting import wait_for
from wire.broker_messages import GetStats
from wire.errors import ErrorCode
from wire.replication_messages import ReplicaFetch, ReplicaFetchResponse, ReplicaFetchRow


class Fetcher(Actor):
    """Stands for a follower's ReplicaFetcher: the answers it got."""

    def setup(self) -> None:
        self.answers: list[ReplicaFetchResponse] = []

    @handles(ReplicaFetchResponse)
    def on_answer(self, msg: ReplicaFetchResponse) -> None:
        self.answers.append(msg)

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> Any:
        return [[a.req_id, [[r.topic, r.partition, r.error_code] for r in a.rows]]
                for a in self.answers]


@pytest.fixture
def node() -> Iterator[Node]:
    n = Node("replica-fetch-failure").start()
    yield n
    n.shutdown(timeout=5)


def test_a_replica_fetch_that_raises_is_answered_in_error(
        node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(ctx: HandlerContext, msg: ReplicaFetch) -> Any:
        raise RuntimeError("injected-failure-of-replica-fetch")
        yield

    monkeypatch.setattr(request_handler, "handle_replica_fetch", failing)
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    ctx = HandlerContext(topo, Config(), 1, "127.0.0.1", 9092, "cluster", 0,
                         {"t": TopicEntry(2, {})}, clock=node.clock)
    handler = node.spawn(RequestHandler, "handler-0", context=ctx)
    fetcher = node.spawn(Fetcher, "fetcher")
    rows = [ReplicaFetchRow("t", p, 0, 0, -1, 1 << 20) for p in (0, 1)]
    for req_id in (7, 8):  # each time: answered, not waited out
        node.tell(handler, ReplicaFetch(req_id, 2, 500, 1, 1 << 20, rows), sender="fetcher")
        got: list[Any] = wait_for(
            lambda n=req_id - 6: (lambda a: a if len(a) == n else None)(
                node.ask(fetcher, GetStats())),
            "the ReplicaFetch answers", timeout=20)
        assert got[-1] == [req_id, [["t", p, int(ErrorCode.UNKNOWN_SERVER_ERROR)]
                                    for p in (0, 1)]], got


def test_a_replica_fetch_no_shard_answers_is_abandoned_and_answered_in_error(
        node: Node) -> None:
    # The shards it asks do not run here: nothing answers, and no other message comes to
    # wake the handler, whose loop skips it only while nothing is pending (quiet_turns).
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    ctx = HandlerContext(topo, Config({"request.timeout.ms": 100}), 1, "127.0.0.1", 9092,
                         "cluster", 0, {"t": TopicEntry(2, {})}, clock=node.clock)
    handler = node.spawn(RequestHandler, "handler-0", context=ctx)
    fetcher = node.spawn(Fetcher, "fetcher")
    rows = [ReplicaFetchRow("t", p, 0, 0, -1, 1 << 20) for p in (0, 1)]
    node.tell(handler, ReplicaFetch(9, 2, 100, 1, 1 << 20, rows), sender="fetcher")
    got: list[Any] = wait_for(lambda: node.ask(fetcher, GetStats()), "the abandoned answer",
                              timeout=20)
    assert got == [[9, [["t", p, int(ErrorCode.UNKNOWN_SERVER_ERROR)] for p in (0, 1)]]]
    assert node.metrics.get("requests_abandoned") == 1

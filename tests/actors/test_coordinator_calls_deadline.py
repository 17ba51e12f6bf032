"""A handler of process 1 answers the group calls a live coordinator answers at once
COORDINATOR_NOT_AVAILABLE by their deadlines when the coordinators' process (the broker's
first) does not answer (paused, or restarted and not ready yet), the connection left
open: a Heartbeat by PROMPT_DEADLINE_MS (the process then taken as silent), an OffsetFetch,
a ListGroups, a DescribeGroups and a LeaveGroup by the short deadline after it, an
OffsetCommit (each partition) by OFFSET_COMMIT_DEADLINE_MS, past the coordinator's own
give-up on its write. Clients then look the coordinator up again and retry.

Two real nodes stand for processes 0 and 1 of one broker, joined by direct links as in a
broker: process 1 runs a real RequestHandler (a Sink as its Processor), process 0 a
stand-in for its coordinator that keeps every call.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.parser import KafkaProtocol

from actors.apis.base import PROMPT_DEADLINE_MS, HandlerContext
from actors.apis.groups import OFFSET_COMMIT_DEADLINE_MS
from actors.core.topic_store import TopicEntry
from actors.request_handler import SILENT_DEADLINE_MS, RequestHandler
from actors.runtime.actor import Actor, handles
from actors.runtime.config import Config
from actors.runtime.node import Directory, Node, NodeEndpoint
from actors.topology import Topology
from tests.actors.test_request_handler_deadline import Sink
from tests.broker.rawclient import build
from tests.fixtures.waiting import wait_for
from wire.broker_messages import GetStats, KafkaRequest
from wire.group_messages import (
    DescribeGroups,
    Heartbeat,
    LeaveGroup,
    ListGroups,
    OffsetCommit,
    OffsetFetch,
)

NOT_AVAILABLE = 15  # COORDINATOR_NOT_AVAILABLE
REQUEST_TIMEOUT_MS = 600  # the broker's request.timeout.ms here: abandon after 1.2 s
MAIN, P1 = "node-1", "node-1-p1"
HEARTBEAT, OFFSET_COMMIT, OFFSET_FETCH = 12, 8, 9
LIST_GROUPS, DESCRIBE_GROUPS, LEAVE_GROUP = 16, 15, 13
SLACK_MS = 3_000  # a loaded host's, past a deadline


def _topology(node: str) -> Topology:
    """A broker of two processes; the coordinators in process 0 (MAIN)."""
    return Topology(node, 1, 1, 2, 2, 1, home=MAIN, process_nodes=(MAIN, P1))


class HeldCoordinator(Actor):
    """Stands for a coordinator whose process does not answer: keeps every call."""

    def setup(self) -> None:
        self.kept = 0

    @handles(Heartbeat, OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, LeaveGroup)
    def on_call(self, _msg: Any) -> None:
        self.kept += 1

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> Any:
        return self.kept


class Handler:
    def __init__(self, tmp_path: Path) -> None:
        ipc = str(tmp_path / "ipc")
        directory = Directory({MAIN: NodeEndpoint("127.0.0.1", 0, ipc),
                               P1: NodeEndpoint("127.0.0.1", 0, ipc)})
        self.nodes: list[Node] = []
        self.main = Node(MAIN, directory=directory, direct_peers=directory.nodes)
        self.nodes.append(self.main)
        self.main.start(gateway=False)
        self.coordinator = self.main.spawn(HeldCoordinator, _topology(MAIN).coordinator(0).name)
        self.main.start_gateway(host=self.coordinator.name)
        self.node = Node(P1, directory=directory, direct_peers=directory.nodes)
        self.nodes.append(self.node)
        self.node.start(gateway=False)
        ctx = HandlerContext(_topology(P1), Config({"request.timeout.ms": REQUEST_TIMEOUT_MS}),
                             1, "127.0.0.1", 9092, "cluster", 0, {"t": TopicEntry(4, {})},
                             clock=self.node.clock)
        self.processor = self.node.spawn(Sink, "processor-0")
        self.handler = self.node.spawn(RequestHandler, "handler-0", context=ctx)
        self.node.start_gateway(host="handler-0")

    def request(self, conn: int, api_key: int, version: int,
                values: dict[str, Any]) -> tuple[int, KafkaProtocol]:
        protocol = KafkaProtocol(client_id="t")
        correlation_id = protocol.send_request(build(api_key, version, values))
        frame = bytes(protocol.send_bytes())[4:]
        sent = time.monotonic_ns()
        self.node.tell(self.handler, KafkaRequest(conn, 0, "processor-0", api_key, version,
                                                  correlation_id, frame, sent))
        return sent, protocol

    def response(self, conn: int, sent: int, protocol: KafkaProtocol) -> tuple[Any, float]:
        """The answer on ``conn`` (the connection left open) and how long it took (ms)."""
        respond, close, frame, at = wait_for(
            lambda: self.node.ask(self.processor, GetStats()).get(str(conn)),
            f"the answer on connection {conn}", timeout=40)
        assert (respond, close) == (True, False), "the connection must stay open"
        [(_, response)] = protocol.receive_bytes(frame)
        return response, (at - sent) / 1e6

    def close(self) -> None:
        for node in reversed(self.nodes):
            node.shutdown(timeout=5)


@pytest.fixture
def handler(tmp_path: Path) -> Iterator[Handler]:
    h = Handler(tmp_path)
    yield h
    h.close()


def test_the_group_calls_answer_coordinator_not_available_by_their_deadlines(
        handler: Handler) -> None:
    # sent first, answered last: its deadline waits out the coordinator's own give-up
    commit = handler.request(1, OFFSET_COMMIT, 7, {
        "group_id": "g", "generation_id_or_member_epoch": 1, "member_id": "m",
        "group_instance_id": None, "topics": [{"name": "t", "partitions": [
            {"partition_index": p, "committed_offset": 5, "committed_leader_epoch": -1,
             "committed_metadata": ""} for p in (0, 1)]}]})
    sent, protocol = handler.request(2, HEARTBEAT, 3, {
        "group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": None})
    response, waited_ms = handler.response(2, sent, protocol)
    assert response.error_code == NOT_AVAILABLE, response
    assert PROMPT_DEADLINE_MS <= waited_ms < PROMPT_DEADLINE_MS + SLACK_MS, waited_ms
    metrics = handler.node.metrics
    assert metrics.get("processes_marked_silent") == 1

    # process 0 taken as silent: the short deadline, the calls withheld (not sent)
    sent, protocol = handler.request(3, OFFSET_FETCH, 7, {
        "group_id": "g", "topics": None, "require_stable": False})
    response, waited_ms = handler.response(3, sent, protocol)
    assert response.error_code == NOT_AVAILABLE, response
    assert SILENT_DEADLINE_MS <= waited_ms < PROMPT_DEADLINE_MS / 2, waited_ms
    sent, protocol = handler.request(4, LIST_GROUPS, 3, {})
    response, waited_ms = handler.response(4, sent, protocol)
    assert (response.error_code, response.groups) == (NOT_AVAILABLE, []), response
    assert waited_ms < PROMPT_DEADLINE_MS / 2, waited_ms
    sent, protocol = handler.request(5, DESCRIBE_GROUPS, 4, {
        "groups": ["g", "h"], "include_authorized_operations": False})
    response, waited_ms = handler.response(5, sent, protocol)
    assert [(g.group_id, g.error_code) for g in response.groups] == [
        ("g", NOT_AVAILABLE), ("h", NOT_AVAILABLE)], response
    assert waited_ms < PROMPT_DEADLINE_MS / 2, waited_ms
    sent, protocol = handler.request(6, LEAVE_GROUP, 3, {
        "group_id": "g", "members": [{"member_id": "m", "group_instance_id": None}]})
    response, waited_ms = handler.response(6, sent, protocol)
    assert response.error_code == NOT_AVAILABLE, response
    assert waited_ms < PROMPT_DEADLINE_MS / 2, waited_ms

    # the commit: not shortened (it may rightly wait for its write), each partition's code
    response, waited_ms = handler.response(1, *commit)
    assert [p.error_code for p in response.topics[0].partitions] == [NOT_AVAILABLE] * 2
    assert OFFSET_COMMIT_DEADLINE_MS <= waited_ms < OFFSET_COMMIT_DEADLINE_MS + SLACK_MS
    # the heartbeat, whose deadline marked process 0, is its probe: the four group calls
    # after it are answered by the short deadline unsent (a commit is sent: no silence)
    assert handler.main.ask(handler.coordinator, GetStats()) == 2, "the commit, the probe"
    assert metrics.get("internal_calls_withheld") == 4
    assert metrics.get("internal_calls_timed_out") == 6
    assert metrics.get("requests_abandoned") == 0

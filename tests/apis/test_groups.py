"""The group API functions at every advertised version, without actors.

Each request is encoded the way a client would (kafka.protocol), decoded by
the broker codec, run through its API generator with the coordinator's
answer given by hand, and the response encoded by the codec and decoded
again as a client would: every version must round-trip, carry the answer's
values, and send each call to the group's coordinator.
"""

from __future__ import annotations

from typing import Any

import pytest
from kafka.protocol.admin import DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.consumer import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata import FindCoordinatorRequest

from actors.apis import groups
from actors.apis.base import HandlerContext
from actors.runtime.clock import ManualClock
from actors.runtime.config import Config
from actors.topology import Topology
from wire import kafka_codec as kc
from wire.api_versions import ADVERTISED_BY_KEY
from wire.broker_messages import TopicEntry, TopicPartition
from wire.errors import ErrorCode
from wire.group_messages import (
    DescribeGroupRow,
    DescribeGroupsDone,
    DescribeMemberRow,
    HeartbeatDone,
    JoinGroupDone,
    JoinGroupMemberRow,
    JoinProtocolRow,
    LeaveGroupDone,
    LeaveGroupMemberRow,
    LeaveMemberRow,
    ListGroupsDone,
    ListGroupsRow,
    OffsetCommitDone,
    OffsetCommitDoneRow,
    OffsetCommitRow,
    OffsetFetchDone,
    OffsetFetchDoneRow,
    SyncGroupDone,
)

TOPOLOGY = Topology("n", 1, 1, 1, 1, 3)


def context() -> HandlerContext:
    return HandlerContext(TOPOLOGY, Config(), 1, "127.0.0.1", 9092, "cluster", 0,
                          {"t": TopicEntry(2, {})}, clock=ManualClock())


def versions(api_key: int) -> list[int]:
    entry = ADVERTISED_BY_KEY[api_key]
    return list(range(entry.min_version, entry.max_version + 1))


def run(request: Any, version: int, answer: Any) -> tuple[Any, list[Any]]:
    """(decoded response, messages the API sent) for ``request`` at ``version``."""
    request.with_header(correlation_id=5, client_id="client-a")
    frame = bytes(request.encode(version=version, header=True))
    header = kc.parse_request_header(frame)
    decoded = kc.decode_request(header, frame)
    gen = getattr(groups, _HANDLERS[request.API_KEY])(context(), header, decoded)
    sent: list[Any] = []
    try:
        calls = next(gen)
        while True:
            msgs = [(c.target, c.make(100 + i)) for i, c in enumerate(calls)]
            sent.extend(msgs)
            calls = gen.send([answer(target, m) for target, m in msgs])
    except StopIteration as stop:
        respond = stop.value
    out = kc.encode_response(header, respond.data)
    body = out[4:]
    return kc.response_class(request.API_KEY, version).decode(body, version=version,
                                                              header=True), sent


_HANDLERS = {
    8: "handle_offset_commit", 9: "handle_offset_fetch", 10: "handle_find_coordinator",
    11: "handle_join_group", 12: "handle_heartbeat", 13: "handle_leave_group",
    14: "handle_sync_group", 15: "handle_describe_groups", 16: "handle_list_groups",
}


@pytest.mark.parametrize("version", versions(10))
def test_find_coordinator(version: int) -> None:
    req = FindCoordinatorRequest(key="g", key_type=0, coordinator_keys=["g", "h"])
    resp, sent = run(req, version, None)
    assert sent == []
    if version >= 4:
        assert [(c.key, c.node_id, c.port) for c in resp.coordinators] == [
            ("g", 1, 9092), ("h", 1, 9092)]
    else:
        assert (resp.error_code, resp.node_id, resp.host, resp.port) == (0, 1, "127.0.0.1", 9092)


@pytest.mark.parametrize("version", versions(11))
def test_join_group(version: int) -> None:
    req = JoinGroupRequest(
        group_id="g", session_timeout_ms=6000, rebalance_timeout_ms=9000, member_id="m-1",
        group_instance_id="i-1", protocol_type="consumer", reason=None,
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"sub")])

    def answer(_target: Any, m: Any) -> JoinGroupDone:
        return JoinGroupDone(m.req_id, 0, 3, "consumer", "range", "m-1", "m-1",
                             [JoinGroupMemberRow("m-1", m.group_instance_id, b"sub")])

    resp, [(target, msg)] = run(req, version, answer)
    assert target == TOPOLOGY.coordinator_for("g")
    assert (msg.client_id, msg.protocols, msg.session_timeout_ms) == (
        "client-a", [JoinProtocolRow("range", b"sub")], 6000)
    assert msg.rebalance_timeout_ms == (9000 if version >= 1 else -1)
    assert msg.require_known_member_id == (version >= 4)
    assert msg.group_instance_id == ("i-1" if version >= 5 else None)
    assert (resp.error_code, resp.generation_id, resp.leader, resp.member_id) == (
        0, 3, "m-1", "m-1")
    assert resp.protocol_name == "range"
    assert [(m.member_id, m.metadata) for m in resp.members] == [("m-1", b"sub")]


@pytest.mark.parametrize("version", versions(11))
def test_join_group_error_without_protocol(version: int) -> None:
    req = JoinGroupRequest(group_id="g", session_timeout_ms=6000, rebalance_timeout_ms=9000,
                           member_id="", group_instance_id=None, protocol_type="consumer",
                           protocols=[])
    code = int(ErrorCode.MEMBER_ID_REQUIRED)
    resp, _ = run(req, version, lambda _t, m: JoinGroupDone(m.req_id, code, -1, None, None, "",
                                                              "new-id", []))
    assert (resp.error_code, resp.member_id, resp.members) == (code, "new-id", [])


@pytest.mark.parametrize("version", versions(14))
def test_sync_group(version: int) -> None:
    req = SyncGroupRequest(
        group_id="g", generation_id=3, member_id="m-1", group_instance_id=None,
        protocol_type="consumer", protocol_name="range",
        assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id="m-1",
                                                                 assignment=b"a")])
    resp, [(_t, msg)] = run(req, version, lambda _t, m: SyncGroupDone(
        m.req_id, 0, "consumer", "range", b"mine"))
    assert (msg.generation_id, msg.assignments) == (3, {"m-1": b"a"})
    assert msg.protocol_name == ("range" if version >= 5 else None)
    assert (resp.error_code, resp.assignment) == (0, b"mine")


@pytest.mark.parametrize("version", versions(12))
def test_heartbeat(version: int) -> None:
    req = HeartbeatRequest(group_id="g", generation_id=3, member_id="m-1",
                           group_instance_id=None)
    code = int(ErrorCode.REBALANCE_IN_PROGRESS)
    resp, [(_t, msg)] = run(req, version, lambda _t, m: HeartbeatDone(m.req_id, code))
    assert (msg.generation_id, msg.member_id) == (3, "m-1")
    assert resp.error_code == code


@pytest.mark.parametrize("version", versions(13))
def test_leave_group(version: int) -> None:
    req = LeaveGroupRequest(group_id="g", member_id="m-1", members=[
        LeaveGroupRequest.MemberIdentity(member_id="m-1", group_instance_id=None),
        LeaveGroupRequest.MemberIdentity(member_id="m-2", group_instance_id="i-2")])
    unknown = int(ErrorCode.UNKNOWN_MEMBER_ID)
    resp, [(_t, msg)] = run(req, version, lambda _t, m: LeaveGroupDone(
        m.req_id, 0, [LeaveGroupMemberRow(r.member_id, r.group_instance_id,
                                          unknown if r.member_id == "m-2" else 0)
                      for r in m.members]))
    if version >= 3:
        assert msg.members == [LeaveMemberRow("m-1", None), LeaveMemberRow("m-2", "i-2")]
        assert [(m.member_id, m.error_code) for m in resp.members] == [
            ("m-1", 0), ("m-2", unknown)]
    else:
        assert msg.members == [LeaveMemberRow("m-1", None)]
        assert resp.error_code == 0


@pytest.mark.parametrize("version", versions(8))
def test_offset_commit(version: int) -> None:
    part = OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition
    req = OffsetCommitRequest(
        group_id="g", generation_id_or_member_epoch=3, member_id="m-1", group_instance_id=None,
        retention_time_ms=-1, topics=[
            OffsetCommitRequest.OffsetCommitRequestTopic(name="t", partitions=[
                part(partition_index=0, committed_offset=10, committed_leader_epoch=2,
                     committed_metadata="x"),
                part(partition_index=5, committed_offset=1, committed_leader_epoch=-1,
                     committed_metadata="")]),
            OffsetCommitRequest.OffsetCommitRequestTopic(name="nope", partitions=[
                part(partition_index=0, committed_offset=1, committed_leader_epoch=-1,
                     committed_metadata="")])])
    resp, [(_t, msg)] = run(req, version, lambda _t, m: OffsetCommitDone(
        m.req_id, [OffsetCommitDoneRow(r.topic, r.partition, 0) for r in m.rows]))
    assert msg.rows == [OffsetCommitRow("t", 0, 10, 2 if version >= 6 else -1, "x")]
    unknown = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    assert [(t.name, p.partition_index, p.error_code) for t in resp.topics
            for p in t.partitions] == [("t", 0, 0), ("t", 5, unknown), ("nope", 0, unknown)]


@pytest.mark.parametrize("version", versions(9))
def test_offset_fetch(version: int) -> None:
    topics = [OffsetFetchRequest.OffsetFetchRequestTopic(name="t", partition_indexes=[0, 1])]
    group = OffsetFetchRequest.OffsetFetchRequestGroup
    req = OffsetFetchRequest(group_id="g", topics=topics, require_stable=False, groups=[
        group(group_id="g", member_id=None, member_epoch=-1, topics=[
            group.OffsetFetchRequestTopics(name="t", partition_indexes=[0, 1])]),
        group(group_id="h", member_id=None, member_epoch=-1, topics=None)])

    def answer(target: Any, m: Any) -> OffsetFetchDone:
        assert target == TOPOLOGY.coordinator_for(m.group_id)
        return OffsetFetchDone(m.req_id, 0, [OffsetFetchDoneRow("t", 0, 42, -1, "meta", 0),
                                             OffsetFetchDoneRow("t", 1, -1, -1, "", 0)])

    resp, sent = run(req, version, answer)
    if version >= 8:
        assert [m.rows for _t, m in sent] == [[TopicPartition("t", 0), TopicPartition("t", 1)],
                                              None]
        fetched = [(g.group_id, [(p.partition_index, p.committed_offset)
                                 for t in g.topics for p in t.partitions]) for g in resp.groups]
        assert fetched == [("g", [(0, 42), (1, -1)]), ("h", [(0, 42), (1, -1)])]
    else:
        assert [m.rows for _t, m in sent] == [[TopicPartition("t", 0), TopicPartition("t", 1)]]
        assert [(p.partition_index, p.committed_offset, p.metadata)
                for t in resp.topics for p in t.partitions] == [(0, 42, "meta"), (1, -1, "")]


def test_offset_fetch_v1_puts_a_group_error_on_every_partition() -> None:
    topics = [OffsetFetchRequest.OffsetFetchRequestTopic(name="t", partition_indexes=[0, 1])]
    loading = int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    resp, _ = run(OffsetFetchRequest(group_id="g", topics=topics), 1,
                  lambda _t, m: OffsetFetchDone(m.req_id, loading, []))
    assert [(p.partition_index, p.error_code) for t in resp.topics for p in t.partitions] == [
        (0, loading), (1, loading)]


@pytest.mark.parametrize("version", versions(16))
def test_list_groups_asks_every_coordinator(version: int) -> None:
    req = ListGroupsRequest(states_filter=["Stable"], types_filter=["classic"])
    resp, sent = run(req, version, lambda target, m: ListGroupsDone(
        m.req_id, 0, [ListGroupsRow(f"g-{target.name}", "consumer", "Stable")]))
    assert sorted(t.name for t, _m in sent) == ["coordinator-0", "coordinator-1", "coordinator-2"]
    assert all(m.states == (["Stable"] if version >= 4 else None) for _t, m in sent)
    assert sorted(g.group_id for g in resp.groups) == [
        "g-coordinator-0", "g-coordinator-1", "g-coordinator-2"]


@pytest.mark.parametrize("version", versions(15))
def test_describe_groups_keeps_request_order(version: int) -> None:
    ids = [f"group-{i}" for i in range(6)]
    req = DescribeGroupsRequest(groups=ids, include_authorized_operations=False)

    def answer(target: Any, m: Any) -> DescribeGroupsDone:
        assert all(TOPOLOGY.coordinator_for(g) == target for g in m.group_ids)
        return DescribeGroupsDone(m.req_id, [
            DescribeGroupRow(0, g, "Stable", "consumer", "range", [
                DescribeMemberRow("m", None, "client", "/10.0.0.1", b"meta", b"assign")])
            for g in m.group_ids])

    resp, sent = run(req, version, answer)
    assert len(sent) == len({TOPOLOGY.coordinator_for(g) for g in ids}) > 1
    assert [g.group_id for g in resp.groups] == ids
    member = resp.groups[0].members[0]
    assert (member.client_host, member.member_metadata, member.member_assignment) == (
        "/10.0.0.1", b"meta", b"assign")


@pytest.mark.parametrize(("peer", "printed"), [
    ("127.0.0.1", "/127.0.0.1"),
    ("::1", "/0:0:0:0:0:0:0:1"),
    ("2001:db8::a:0:1", "/2001:db8:0:0:0:a:0:1"),
    ("::ffff:127.0.0.1", "/127.0.0.1"),  # IPv4-mapped: Java makes it an Inet4Address
    ("fe80::1%eth0", "/fe80:0:0:0:0:0:0:1%eth0"),
    ("", ""),
])
def test_a_members_host_is_printed_as_java_prints_its_address(peer: str, printed: str) -> None:
    """Kafka keeps a member's host as InetAddress.toString: DescribeGroups shows
    "/0:0:0:0:0:0:0:1" for an IPv6 loopback client, not "/::1"."""
    assert groups.java_host(peer) == printed

"""A trace id set on the first message follows every message it causes, across hosts."""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

import pytest
from click.testing import CliRunner

from actors.cli import cli
from actors.metadata.zk_server import free_port
from actors.runtime.actor import Actor, handles
from actors.runtime.address import Address
from actors.runtime.direct import DirectLink
from actors.runtime.node import Directory, Node, NodeEndpoint
from actors.trace.store import read_trace_dirs
from tests.fixtures.waiting import wait_for
from wire.registry import message


@message(9101)
class Hop(NamedTuple):
    left: int


@message(9102)
class Count(NamedTuple):
    pass


class Bouncer(Actor):
    """Passes a Hop back and forth between two nodes until it runs out."""

    def setup(self) -> None:
        self.seen = 0

    @handles(Hop)
    def on_hop(self, msg: Hop) -> None:
        self.seen += 1
        if msg.left > 0:
            other = "b" if self.node.name == "a" else "a"
            self.tell(Address(other, "bouncer"), Hop(msg.left - 1))

    @handles(Count)
    def count(self, _msg: Count) -> int:
        return self.seen


@pytest.mark.parametrize("link", ["tcp", "direct"])
def test_trace_follows_a_chain_across_hosts_and_trace_show_prints_it(tmp_path: Path,
                                                                    link: str) -> None:
    """tcp: two hosts; direct: two processes of one broker, whose worker loops (the
    bouncers', with the gateways in them) talk over direct links (actors.runtime.direct)."""
    direct = link == "direct"
    ipc_dir = str(tmp_path / "ipc") if direct else ""
    directory = Directory({
        "a": NodeEndpoint("127.0.0.2", 0 if direct else free_port("127.0.0.2"), ipc_dir),
        "b": NodeEndpoint("127.0.0.3" if not direct else "127.0.0.2",
                          0 if direct else free_port("127.0.0.3"), ipc_dir),
    })
    a, b = (Node(n, directory=directory, data_dir=tmp_path / n, trace_sample_ratio=1.0,
                 direct_peers=("a", "b") if direct else ()).start(gateway=False)
            for n in ("a", "b"))
    try:
        for node in (a, b):
            node.spawn(Bouncer, "bouncer")
            node.start_gateway(host="bouncer" if direct else None)
        a.tell(Address("a", "bouncer"), Hop(5), trace_id=777)
        a.tell(Address("a", "bouncer"), Hop(1), trace_id=888)  # a second, separate chain
        wait_for(lambda: a.ask(Address("a", "bouncer"), Count(), trace_id=0) == 4)
        wait_for(lambda: b.ask(Address("b", "bouncer"), Count(), trace_id=0) == 4)
        if direct:
            assert isinstance(a.actor("bouncer")._out_sockets[Address("b", "bouncer")],
                              DirectLink)
    finally:
        a.shutdown()
        b.shutdown()
    records = read_trace_dirs([tmp_path / "a", tmp_path / "b"])
    chain = [r for r in records if r["trace_id"] == 777]
    hops = [r for r in chain if r["kind"] == "hop"]
    # 6 hops, one record each, written by the receiver: half of them on each node
    assert len(hops) == 6
    assert sorted(r["node"] for r in hops) == ["a"] * 3 + ["b"] * 3
    spans = {r["span_id"]: r for r in hops}
    roots = [s for s in spans.values() if s["parent_span_id"] == 0]
    assert len(roots) == 1  # each later hop's parent is the hop that caused it
    assert all(s["parent_span_id"] in spans for s in spans.values() if s["parent_span_id"])
    # the 5 hops between the nodes each have a network leg, recorded by the receiving gateway
    nets = [r for r in chain if r["kind"] == "net"]
    assert sorted(r["span_id"] for r in nets) == sorted(
        r["span_id"] for r in hops if r["sender"].rpartition("@")[2] != r["node"])
    assert len(nets) == 5 and {r["actor"] for r in nets} == {"_gateway"}
    for net in nets:
        hop = spans[net["span_id"]]
        assert (net["sender"], net["msg_type"], net["sent_ns"]) == (
            hop["sender"], "Hop", hop["sent_ns"])
        # at the gateway before the actor took it (the actor may start before the gateway
        # has read the clock again after handing the frame over: done is not ordered)
        assert net["recv_ns"] <= net["done_ns"] and net["recv_ns"] <= hop["recv_ns"]

    result = CliRunner().invoke(
        cli, ["trace", "show", "777", "--dir", str(tmp_path / "a"), "--dir", str(tmp_path / "b")]
    )
    assert result.exit_code == 0, result.output
    lines = [ln for ln in result.output.splitlines() if "Hop:" in ln]
    assert len(lines) == 6
    assert "_external@a -> bouncer@a" in lines[0] and "bouncer@a -> bouncer@b" in lines[1]
    # the first hop stays on node a; the second crossed the network (its leg is shown)
    assert "(network" in lines[1] and "(network" not in lines[0]
    assert all("mailbox" in ln and "handler" in ln for ln in lines)
    # One level deeper per hop: the tree is the chain of causes, whatever the clocks say.
    # (The indent is the space between "us" and the message; the padding of the
    # right-aligned times before it says nothing about the tree.)
    depths = [len(m.group(1)) // 2 for ln in lines if (m := re.search(r" us  ( *)Hop:", ln))]
    assert depths == [0, 1, 2, 3, 4, 5]

    missing = CliRunner().invoke(cli, ["trace", "show", "12345", "--dir", str(tmp_path / "a")])
    assert missing.exit_code != 0 and "not found" in missing.output


def test_gateways_estimate_clock_offsets_between_hosts(tmp_path: Path) -> None:
    """Two loopback hosts on one machine share a clock: the estimate is near 0."""
    from actors.runtime.node import Gateway
    from wire.runtime_messages import GetClockOffsets

    Gateway.PING_INTERVAL_MS = 100
    directory = Directory({
        "a": NodeEndpoint("127.0.0.2", free_port("127.0.0.2")),
        "b": NodeEndpoint("127.0.0.3", free_port("127.0.0.3")),
    })
    a = Node("a", directory=directory).start()
    b = Node("b", directory=directory, data_dir=tmp_path / "b", trace_sample_ratio=0.01).start()
    try:
        offsets = wait_for(lambda: b.ask(Address("b", "_gateway"), GetClockOffsets()))
        rtt_ns, offset_ns = offsets["a"]
        assert 0 < rtt_ns < 1_000_000_000
        assert abs(offset_ns) <= rtt_ns  # the truth (0) lies within the round trip
        # b's tracer now records its offset to the reference clock (node "a")
        assert abs(b.tracer.clock_offset_ns) <= rtt_ns
        # a's own estimate of b comes from its own pings, which may answer later than b's
        assert wait_for(lambda: a.ask(Address("a", "_gateway"), GetClockOffsets()))
        assert a.tracer.clock_offset_ns == 0  # a is the reference
    finally:
        Gateway.PING_INTERVAL_MS = 2000
        a.shutdown()
        b.shutdown()
    # b traced: every Pong it got is a clock record with the raw Ping/Pong times
    clocks = [r for r in read_trace_dirs([tmp_path / "b"]) if r["kind"] == "clock"]
    assert clocks and {r["sender"] for r in clocks} == {"a"}
    for r in clocks:
        assert r["node"] == "b" and r["actor"] == "_gateway"
        assert r["sent_ns"] <= r["done_ns"]  # Ping left, Pong came back (b's clock)
        assert abs(r["recv_ns"] - (r["sent_ns"] + r["done_ns"]) // 2) <= r["done_ns"] - r["sent_ns"]

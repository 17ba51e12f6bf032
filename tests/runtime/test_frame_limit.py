"""No legal message is lost for the size of a batch (issue 13).

What one turn sends to one receiver is cut into frames under the limit, in
order; a message too large for any frame is refused to its sender (an ask
gets an error answer, an external sender an exception), counted and logged
once with sender, receiver, type and size. Real actors, real ZeroMQ sockets.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.runtime.actor import Actor, handles
from actors.runtime.address import Address
from actors.runtime.errors import AskFailed, MessageTooLarge
from actors.runtime.node import Node
from wire.envelope import decode_frame, encode_frame, encode_frames, new_entry
from wire.registry import message

LIMIT = 64 * 1024


@message(9601)
class Blob(NamedTuple):
    n: int
    data: bytes


@message(9602)
class SendBlobs(NamedTuple):
    """Tell one Blob per size, in one turn, to ``name``."""

    sizes: list[int]
    name: str


@message(9603)
class Collected(NamedTuple):
    pass


@message(9604)
class Huge(NamedTuple):
    """Ask for a return value of ``size`` bytes."""

    size: int


class Collector(Actor):
    def setup(self) -> None:
        self.got: list[tuple[str, int, int]] = []

    @handles(Blob)
    def on_blob(self, msg: Blob) -> None:
        assert self.current_sender is not None
        self.got.append((self.current_sender.name, msg.n, len(msg.data)))

    @handles(Collected)
    def collected(self, _msg: Collected) -> list[tuple[str, int, int]]:
        return self.got

    @handles(Huge)
    def huge(self, msg: Huge) -> bytes:
        return b"h" * msg.size


class BlobSender(Actor):
    def setup(self) -> None:
        self.refused: list[tuple[str, str, int, int]] = []

    @handles(SendBlobs)
    def on_send(self, msg: SendBlobs) -> None:
        target = Address(self.node.name, msg.name)
        for n, size in enumerate(msg.sizes):
            self.tell(target, Blob(n, b"b" * size))

    def on_refused(self, address: Address, msg: Any, frame_bytes: int) -> None:
        self.refused.append((str(address), type(msg).__name__, msg.n, frame_bytes))

    @handles(Collected)
    def collected(self, _msg: Collected) -> list[tuple[str, str, int, int]]:
        return self.refused


@pytest.fixture
def node() -> Iterator[Node]:
    n = Node("frames", max_frame_bytes=LIMIT).start()
    n.spawn(Collector, "collector")
    n.spawn(BlobSender, "sender")
    yield n
    n.shutdown(timeout=5)


def collected(node: Node, name: str, count: int) -> list[Any]:
    deadline = time.monotonic() + 20
    while True:
        got = node.ask(Address(node.name, name), Collected())
        if len(got) >= count or time.monotonic() > deadline:
            return [tuple(g) for g in got]
        time.sleep(0.02)


def test_a_turn_over_the_frame_limit_arrives_whole_and_in_order(node: Node) -> None:
    sizes = [10_000] * 40  # 400 KB in one turn: six times the limit
    node.tell(Address(node.name, "sender"), SendBlobs(sizes, "collector"))
    got = collected(node, "collector", len(sizes))
    assert got == [("sender", n, size) for n, size in enumerate(sizes)]
    assert node.dead_letters.total == 0


def test_one_message_over_the_limit_is_refused_to_its_sender_and_the_rest_arrive(
        node: Node, log_lines: list[str]) -> None:
    sizes = [30_000, 30_000, 100_000, 30_000]
    node.tell(Address(node.name, "sender"), SendBlobs(sizes, "collector"))
    got = collected(node, "collector", 3)
    assert got == [("sender", 0, 30_000), ("sender", 1, 30_000), ("sender", 3, 30_000)]
    refused = collected(node, "sender", 1)
    assert len(refused) == 1
    address, kind, n, frame_bytes = refused[0]
    assert (address, kind, n) == ("collector@frames", "Blob", 2)
    assert 100_000 < frame_bytes < 100_200
    assert node.metrics.get("messages_refused_oversized") == 1
    assert node.dead_letters.by_reason() == {"message over the frame limit": 1}
    lines = [line for line in log_lines if "over the frame limit" in line]
    assert len(lines) == 1, lines  # logged once, with sender, receiver, type and size
    for part in ("sender=sender@frames", "receiver=collector@frames", "Blob",
                 f"{frame_bytes} bytes", f"limit {LIMIT}"):
        assert part in lines[0]


def test_an_ask_whose_reply_is_over_the_limit_gets_an_error_answer(node: Node) -> None:
    start = time.monotonic()
    with pytest.raises(AskFailed, match=r"the reply of \d+ bytes is over the 65536 byte frame"):
        node.ask(Address(node.name, "collector"), Huge(200_000), timeout=10)
    assert time.monotonic() - start < 10  # an answer, not a timeout
    assert node.ask(Address(node.name, "collector"), Huge(1000), timeout=10) == b"h" * 1000


def test_an_external_sender_is_told_at_once(node: Node) -> None:
    with pytest.raises(MessageTooLarge, match=r"Blob of \d+ bytes from _external to "
                                              r"collector@frames is over the 65536 byte"):
        node.tell(Address(node.name, "collector"), Blob(0, b"x" * 100_000))
    node.tell(Address(node.name, "collector"), Blob(1, b"x" * 10))
    assert collected(node, "collector", 1) == [("_external", 1, 10)]


# ----------------------------------------------------------- the pure split


def entries_of(sizes: list[int]) -> list[list[Any]]:
    return [new_entry(9601, 0, 0, 0, 123, 0, [n, b"e" * size]) for n, size in enumerate(sizes)]


def test_entries_within_the_limit_make_one_frame_encoded_once() -> None:
    entries = entries_of([10, 20])
    frames, refused = encode_frames("a", "b", "c", entries, LIMIT)
    assert frames == [encode_frame("a", "b", "c", entries)]
    assert refused == []


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(0, 3000), max_size=60), limit=st.integers(200, 8000))
def test_split_frames_are_valid_in_order_and_under_the_limit(sizes: list[int],
                                                             limit: int) -> None:
    entries = entries_of(sizes)
    frames, refused = encode_frames("node-a", "sender", "receiver", entries, limit)
    assert all(len(f) <= limit for f in frames)
    decoded = []
    for frame in frames:
        s_node, s_name, r_name, got = decode_frame(frame, limit)
        assert (s_node, s_name, r_name) == ("node-a", "sender", "receiver")
        assert got or not entries  # no empty frame
        decoded.extend(got)
    left_out = {r.entry for r in refused}
    assert decoded == [e for i, e in enumerate(entries) if i not in left_out]
    for r in refused:  # refused only what cannot fit alone, with its true size
        alone = len(encode_frame("node-a", "sender", "receiver", [entries[r.entry]]))
        assert r.frame_bytes == alone > limit
    for i, e in enumerate(entries):
        if i not in left_out:
            assert len(encode_frame("node-a", "sender", "receiver", [e])) <= limit

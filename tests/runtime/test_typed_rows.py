"""Rows inside messages on real actors: checked and rebuilt when they come over a
socket, refused to dead letters when malformed, handed over untouched in memory."""

from __future__ import annotations

from typing import Any, NamedTuple

import msgpack
import pytest
from loguru import logger

from actors.runtime.actor import Actor, handles
from actors.runtime.address import Address
from actors.runtime.node import Node
from tests.runtime.node_actors import GetState
from tests.runtime.test_runtime import wait_for
from wire.envelope import FORMAT_VERSION
from wire.registry import message, type_id_of


class Item(NamedTuple):
    name: str
    size: int


@message(9501)
class Batch(NamedTuple):
    rows: list[Item]


@message(9502)
class SendBatch(NamedTuple):
    """Build a Batch and tell it to ``name``; the Batch sent is kept in ``SENT``."""

    name: str


SENT: dict[str, Batch] = {}


class Keeper(Actor):
    """Keeps every Batch it gets; reports what its rows are and whether they are the sent ones."""

    def setup(self) -> None:
        self.got: list[Batch] = []

    @handles(Batch)
    def on_batch(self, msg: Batch) -> None:
        self.got.append(msg)

    @handles(GetState)
    def state(self, _msg: GetState) -> list[dict[str, Any]]:
        return [{
            "rows": [[type(r).__name__, r.name, r.size] for r in b.rows],
            "same_object": any(b is sent for sent in SENT.values()),
            "same_rows": any(b.rows is sent.rows for sent in SENT.values()),
        } for b in self.got]


class BatchSender(Actor):
    @handles(SendBatch)
    def on_send(self, msg: SendBatch) -> None:
        batch = Batch([Item(self.name, 1), Item(self.name, 2)])
        SENT[self.name] = batch
        self.tell(Address(self.node.name, msg.name), batch)


@pytest.fixture(autouse=True)
def nothing_sent() -> None:
    SENT.clear()


def _frame(body: Any) -> bytes:
    entry = [type_id_of(Batch), 0, 0, 0, 0, 0, body]
    return msgpack.packb([FORMAT_VERSION, "t", "test", "keeper", [entry]])


def test_malformed_rows_from_the_network_are_dead_letters_and_good_ones_arrive_typed(
    node: Node,
) -> None:
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="WARNING")
    keeper = node.spawn(Keeper, "keeper")
    node.send_raw(keeper, _frame([[["a", 1], ["b"]]]))
    node.send_raw(keeper, _frame([[["a", "one"]]]))
    node.send_raw(keeper, _frame([[["a", 1], ["b", 2]]]))
    got = wait_for(lambda: node.ask(keeper, GetState()))
    logger.remove(sink)
    assert node.dead_letters.by_reason() == {"malformed envelope": 2}
    dead = [line for line in lines if "dead letter" in line]
    assert len(dead) == 2
    assert "malformed envelope: Batch.rows[1]: Item needs 2 fields, got 1" in dead[0]
    assert "malformed envelope: Batch.rows[0]: Item.size must be int, got str" in dead[1]
    # The actor is unharmed and the well-formed batch arrived with its rows as Items.
    assert [g["rows"] for g in got] == [[["Item", "a", 1], ["Item", "b", 2]]]


def test_rows_between_actors_of_one_loop_are_the_senders_objects(node: Node) -> None:
    host = node.spawn(Keeper, "keeper")
    node.spawn(BatchSender, "near", host=node.actor("keeper"))  # same loop: in memory
    node.spawn(BatchSender, "far")  # a thread of its own: over ZeroMQ and msgpack
    node.tell(Address(node.name, "near"), SendBatch("keeper"))
    node.tell(Address(node.name, "far"), SendBatch("keeper"))
    got = wait_for(lambda: (g := node.ask(host, GetState())) and len(g) == 2 and g)
    near = next(g for g in got if g["rows"][0][1] == "near")
    far = next(g for g in got if g["rows"][0][1] == "far")
    assert near["same_object"] and near["same_rows"]
    assert not far["same_object"] and not far["same_rows"]
    assert far["rows"] == [["Item", "far", 1], ["Item", "far", 2]]
    assert node.dead_letters.total == 0

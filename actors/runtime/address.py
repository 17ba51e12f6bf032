from __future__ import annotations

from typing import NamedTuple

ASK_SENDER = "_asks"
"""The sender name of a node's asks (Node.ask), and the name of its ask router."""


class Address(NamedTuple):
    """Where an actor lives: the node it runs on and its name there."""

    node: str
    name: str

    def __str__(self) -> str:
        return f"{self.name}@{self.node}"

    @classmethod
    def parse(cls, text: str) -> Address:
        """``name@node`` back into an address."""
        name, sep, node = text.rpartition("@")
        if not sep or not name or not node:
            raise ValueError(f"address must look like NAME@NODE, got {text!r}")
        return cls(node, name)

"""What the node's API raises."""

from __future__ import annotations


class NodeError(RuntimeError):
    """A node refused a request: a bad name, a duplicate actor, no route, shut down."""


class AskTimeout(TimeoutError):
    """An ask got no answer in time."""


class AskFailed(RuntimeError):
    """The asked actor's handler raised; the message is its error."""


class MessageTooLarge(NodeError):
    """A message that no frame can carry (over ``actor.max.frame.bytes``); nothing was sent."""

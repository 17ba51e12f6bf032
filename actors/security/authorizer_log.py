"""The ``authorizer`` logger: one line per authorization decision (the shell side of the ACLs).

As Kafka's ``kafka.authorizer.logger``: denials at INFO, grants at DEBUG, so
a log at INFO shows who was refused what without drowning in allowed
requests. Records carry ``actor="authorizer"``; a sink may select them with
``filter=lambda r: r["extra"].get("actor") == "authorizer"``.
"""

from __future__ import annotations

from loguru import logger

from actors.security.acl import Decision

AUTHORIZER = logger.bind(actor="authorizer")


def log_decision(decision: Decision, api: str = "", node: str = "-") -> None:
    """Log one decision; ``api`` names the request that asked (``Fetch``, ``Metadata``)."""
    request = f" for request = {api}" if api else ""
    bound = AUTHORIZER.bind(node=node)
    if decision.allowed:
        bound.debug("{}{}", decision, request)
    else:
        bound.info("{}{}", decision, request)

"""Messages of the security layer (type ids 600-699).

For now the metadata store's notice that a change-notification znode was
added under one of Kafka's change roots (``/config/changes`` for user
credentials, ``/kafka-acl-changes`` and ``/kafka-acl-extended-changes`` for
ACLs): the owner reads the new notifications and refreshes what they name.
"""

from __future__ import annotations

from typing import NamedTuple

from wire.registry import message


@message(600)
class ChangesNotified(NamedTuple):
    """A child was added under the change root ``root`` (a watch fired once; read to re-arm)."""

    session_id: int
    root: str

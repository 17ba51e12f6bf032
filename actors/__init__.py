"""actorlog's broker: a Kafka-compatible log whose request path is an actor system.

Read from the top down: ``cli`` (the ``actorlog`` command) -> ``broker`` (wires
one node's actors) -> one module per actor shell (``acceptor``, ``processor``,
``request_handler``, ``partition_shard``, ``purgatory``, ``timer``,
``controller``, ``group_coordinator``, ``log_manager``; in a cluster
``cluster_controller``, ``replica_manager``, ``replica_fetcher``) -> ``runtime`` (actor
base, node, supervision, tracing, clock) and ``apis`` (one module per Kafka API
family) -> ``core`` (pure state machines) and the ``wire`` package (messages,
envelope, Kafka codec, error codes). ``trace`` reads what nodes traced.

The names below are imported on first use, so importing one module of the
package (``actorlog trace``, a core in a test) does not start the broker's.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from actors.acceptor import Acceptor as Acceptor
    from actors.broker import Broker as Broker
    from actors.broker import BrokerError as BrokerError
    from actors.controller import Controller as Controller
    from actors.group_coordinator import GroupCoordinator as GroupCoordinator
    from actors.log_manager import LogManager as LogManager
    from actors.partition_shard import PartitionShard as PartitionShard
    from actors.processor import Processor as Processor
    from actors.purgatory import PurgatoryShard as PurgatoryShard
    from actors.request_handler import RequestHandler as RequestHandler
    from actors.timer import Timer as Timer
    from actors.topology import Topology as Topology

_EXPORTS: dict[str, str] = {
    "Acceptor": "actors.acceptor",
    "Broker": "actors.broker",
    "BrokerError": "actors.broker",
    "Controller": "actors.controller",
    "GroupCoordinator": "actors.group_coordinator",
    "LogManager": "actors.log_manager",
    "PartitionShard": "actors.partition_shard",
    "Processor": "actors.processor",
    "PurgatoryShard": "actors.purgatory",
    "RequestHandler": "actors.request_handler",
    "Timer": "actors.timer",
    "Topology": "actors.topology",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

"""The actor runtime: pykka threads whose mailboxes are ZeroMQ sockets, and the node hosting them.

- ``actor``: the :class:`Actor` base and the :func:`handles` decorator.
- ``node``: :class:`Node` (spawn, tell, ask, quiesce, shutdown) and its ask router.
- ``address``, ``directory`` (where every node's gateway listens), ``gateway``
  (frames from other nodes, clock offsets), ``errors``.
- ``inbox``, ``pykka_compat`` (the only module touching pykka's internals),
  ``supervision`` (restart after a crash), ``counters`` (metrics, dead letters).
- ``tracing`` (sampling and the node's trace writer), ``clock``, ``config``.
"""

from __future__ import annotations

from actors.runtime.actor import Actor, handles
from actors.runtime.address import Address
from actors.runtime.clock import Clock, ManualClock, SystemClock
from actors.runtime.config import Config, ConfigError
from actors.runtime.counters import Counters, DeadLetters
from actors.runtime.directory import Directory, NodeEndpoint, default_ipc_dir
from actors.runtime.errors import AskFailed, AskTimeout, MessageTooLarge, NodeError
from actors.runtime.gateway import Gateway
from actors.runtime.node import Node
from actors.runtime.supervision import RestartWindow
from actors.runtime.tracing import Tracer

__all__ = [
    "Actor",
    "Address",
    "AskFailed",
    "AskTimeout",
    "Clock",
    "Config",
    "ConfigError",
    "Counters",
    "DeadLetters",
    "Directory",
    "Gateway",
    "ManualClock",
    "MessageTooLarge",
    "Node",
    "NodeEndpoint",
    "NodeError",
    "RestartWindow",
    "SystemClock",
    "Tracer",
    "default_ipc_dir",
    "handles",
]

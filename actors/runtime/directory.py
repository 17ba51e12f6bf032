"""Where the nodes of a cluster listen: each node's gateway endpoint."""

from __future__ import annotations

import os
from dataclasses import dataclass, field


@dataclass(frozen=True)
class NodeEndpoint:
    """How other nodes reach a node's gateway."""

    host: str
    port: int = 0
    ipc_dir: str = ""

    def tcp(self) -> str:
        return f"tcp://{self.host}:{self.port}"

    def ipc(self, node: str) -> str:
        return f"ipc://{self.ipc_dir}/{node}.gw"


@dataclass
class Directory:
    """Where every node of the cluster listens.

    Static for a single node; in a cluster the node's Controller actor keeps it
    up to date from the brokers' registrations (:meth:`learn`, :meth:`forget`),
    and every other thread only reads it. A changed or forgotten entry is a new
    object or none at all, and senders compare their link's endpoint with the
    entry by identity, so a link to a node that left or moved is closed and
    made again (or the message goes to dead letters) instead of being used.
    """

    nodes: dict[str, NodeEndpoint] = field(default_factory=dict)

    def add(self, name: str, endpoint: NodeEndpoint) -> None:
        self.nodes[name] = endpoint

    def learn(self, name: str, endpoint: NodeEndpoint) -> bool:
        """Add or replace ``name``'s entry; False (entry kept as is) when it is the same."""
        if self.nodes.get(name) == endpoint:
            return False
        self.nodes[name] = endpoint
        return True

    def forget(self, name: str) -> bool:
        """Drop ``name``'s entry (the node left); False when there was none."""
        return self.nodes.pop(name, None) is not None


def default_ipc_dir() -> str:
    """Where nodes of one host put their gateway sockets (``ACTORLOG_IPC_DIR`` overrides)."""
    return os.environ.get("ACTORLOG_IPC_DIR", f"/tmp/actorlog-ipc-{os.getuid()}")

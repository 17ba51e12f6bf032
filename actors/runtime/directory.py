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
    """Where every node of the cluster listens (static configuration)."""

    nodes: dict[str, NodeEndpoint] = field(default_factory=dict)

    def add(self, name: str, endpoint: NodeEndpoint) -> None:
        self.nodes[name] = endpoint


def default_ipc_dir() -> str:
    """Where nodes of one host put their gateway sockets (``ACTORLOG_IPC_DIR`` overrides)."""
    return os.environ.get("ACTORLOG_IPC_DIR", f"/tmp/actorlog-ipc-{os.getuid()}")

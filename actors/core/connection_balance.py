"""Which process of a broker takes the next connection (num.processes.connection.distribution
= handoff): the live process with the fewest open connections, ties in turn.

Process 0 (the one that accepts) is always live; another is live from its hello on
the handoff link until that link closes (the process died or stopped), and its
connections are forgotten then: they died with it.
"""

from __future__ import annotations

from collections.abc import Collection


class ConnectionBalance:
    def __init__(self, processes: int) -> None:
        if processes < 1:
            raise ValueError(f"processes must be at least 1, got {processes}")
        self.live = [index == 0 for index in range(processes)]
        # per process: its open connections' ids -> the peer host (max.connections.per.ip)
        self.conns: list[dict[int, str]] = [{} for _ in range(processes)]
        self.turn = 0  # where the search for a tie starts

    def choose(self, exclude: Collection[int] = ()) -> int:
        """The process for a new connection; never one in ``exclude`` but process 0."""
        count = len(self.live)
        best, fewest = 0, -1
        for step in range(count):
            index = (self.turn + step) % count
            if not self.live[index] or (index in exclude and index != 0):
                continue
            open_here = len(self.conns[index])
            if fewest < 0 or open_here < fewest:
                best, fewest = index, open_here
        self.turn = (best + 1) % count
        return best

    def opened(self, process: int, conn_id: int, host: str) -> None:
        self.conns[process][conn_id] = host

    def closed(self, process: int, conn_id: int) -> str | None:
        """The connection's peer host, None when it was not counted (a closed link's)."""
        return self.conns[process].pop(conn_id, None)

    def up(self, process: int) -> list[str]:
        """A (new life of a) process took its link: the hosts of connections lost before."""
        lost = self.down(process)
        self.live[process] = True
        return lost

    def down(self, process: int) -> list[str]:
        """The process's link closed: its connections are gone; their peer hosts."""
        if process == 0:
            raise ValueError("process 0 accepts the connections: it cannot go down")
        self.live[process] = False
        lost = list(self.conns[process].values())
        self.conns[process] = {}
        return lost

    def counts(self) -> list[int]:
        return [len(conns) for conns in self.conns]

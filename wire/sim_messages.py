"""Messages of the simulator (type ids 800-899): simulated clients and the socket stand-in.

A simulated Kafka client speaks to a broker node the way a TCP connection
would reach its Processor: whole request frames in, whole response frames
out, in order per connection. The node's SimProcessor (actors/sim/processor.py)
hands each request to the node's real RequestHandler as the Processor does.
"""

from __future__ import annotations

from typing import NamedTuple

from wire.registry import message


@message(800)
class ClientRequest(NamedTuple):
    """Simulated client -> SimProcessor: one request frame (no size prefix) on a connection.

    ``client`` names the sending actor on the client node; responses go back to it.
    """

    conn_id: int
    client: str
    frame: bytes


@message(801)
class ClientResponse(NamedTuple):
    """SimProcessor -> simulated client: one response frame (with its size prefix), in order."""

    conn_id: int
    frame: bytes


@message(802)
class ClientDisconnected(NamedTuple):
    """SimProcessor -> simulated client: the broker closed the connection."""

    conn_id: int

"""SimProcessor: where a broker node's sockets would be, for simulated clients.

A real Processor reads bytes from client sockets, cuts them into request
frames with the connection core, hands each to a RequestHandler as a
KafkaRequest, and writes the KafkaResponses back in request order (sending
file regions from their segment files). This actor does the same between
simulated clients and the node's real handlers, with the same connection
core (actors/core/kafka_connection.py); only the socket is gone: bytes come
in a ClientRequest and go out in a ClientResponse, over the simulated
network, with regions read into the response.
"""

from __future__ import annotations

import os
from typing import Any

from actors.core.file_regions import close_region
from actors.core.kafka_connection import FrameRefused, KafkaConnection, Request
from actors.runtime.actor import Actor, handles
from actors.runtime.address import Address
from actors.runtime.config import Config
from actors.topology import Topology
from wire.api_versions import api_snake_name
from wire.broker_messages import KafkaRequest, KafkaResponse
from wire.sim_messages import ClientDisconnected, ClientRequest, ClientResponse

NAME = "sim-processor"


class SimProcessor(Actor):
    mailbox_size = 0

    def __init__(self, node: Any, name: str, *, topology: Topology, config: Config,
                 **kw: Any) -> None:
        super().__init__(node, name, **kw)
        self.topology = topology
        self.max_request = int(config["socket.request.max.bytes"])
        self.max_in_flight = int(config["queued.max.requests"])

    def setup(self) -> None:
        self.conns: dict[int, tuple[KafkaConnection[KafkaResponse], Address]] = {}
        self.requests = 0
        # (conn, seq) -> (trace id, wall ns at arrival, request bytes)
        self.traces: dict[tuple[int, int], tuple[int, int, int]] = {}

    @handles(ClientRequest)
    def on_client_request(self, msg: ClientRequest) -> None:
        assert self.current_sender is not None
        found = self.conns.get(msg.conn_id)
        if found is None:
            found = (KafkaConnection(self.max_request, self.max_in_flight),
                     Address(self.current_sender.node, msg.client))
            self.conns[msg.conn_id] = found
        core, client = found
        core.receive_data(msg.frame)
        while True:
            event = core.next_event()
            if type(event) is Request:
                self.requests += 1
                now = self.clock.monotonic_ns()
                tracer = self.node.tracer
                tid = tracer.sample() if tracer.enabled else 0
                if tid:  # the request record (client leg) is written when it is answered
                    self.traces[(msg.conn_id, event.seq)] = (tid, self.clock.wall_ns(),
                                                             len(event.frame) + 4)
                self.tell_traced(self.topology.handler_for_conn(msg.conn_id),
                                 KafkaRequest(msg.conn_id, event.seq, self.name, event.api_key,
                                              event.api_version, event.correlation_id,
                                              event.frame, now), tid)
            elif type(event) is FrameRefused:
                del self.conns[msg.conn_id]
                self.tell(client, ClientDisconnected(msg.conn_id))
                return
            else:
                return

    @handles(KafkaResponse)
    def on_response(self, msg: KafkaResponse) -> None:
        found = self.conns.get(msg.conn_id)
        if found is None:
            for region in msg.regions:
                close_region(region)
            return
        core, client = found
        ready = core.receive_response(msg.seq, msg, msg.close)
        for response in ready.responses:
            data = _with_regions(response)
            if response.respond and data:
                self.tell(client, ClientResponse(msg.conn_id, data))
            traced = self.traces.pop((msg.conn_id, response.seq), None)
            if traced is not None:
                tid, in_ns, size = traced
                self.node.tracer.request(tid, self.name, str(client),
                                         api_snake_name(response.api_key), msg.conn_id,
                                         response.correlation_id, response.api_key, size,
                                         len(data), in_ns, self.clock.wall_ns())
        if ready.close:
            del self.conns[msg.conn_id]
            self.tell(client, ClientDisconnected(msg.conn_id))
        else:  # a request held back at the in-flight bound may go now
            self.on_client_request(ClientRequest(msg.conn_id, client.name, b""))


def _with_regions(response: KafkaResponse) -> bytes:
    """The response's bytes with each file region read in at its place (what sendfile sends)."""
    if not response.regions:
        return response.frame
    out = bytearray()
    start = 0
    frame = response.frame
    for region in response.regions:
        out += frame[start:region.at]
        start = region.at
        try:
            if region.length > 0:
                out += os.pread(region.fd, region.length, region.position)
        finally:
            close_region(region)
    out += frame[start:]
    return bytes(out)

"""The ZAP handler's shell: a thread with the REP socket ZeroMQ asks, around :class:`ZapPolicy`.

One per ZeroMQ context (ZAP is per context); start it before any CURVE
server socket of that context binds. A refused peer is logged once, with
its address and key (a refused client reconnects every 100 ms or so; its
later attempts are logged at DEBUG); an admitted one at DEBUG.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import zmq
from loguru import logger

from actors.security.curve import z85_key
from actors.security.zap import ZapDecision, ZapPolicy

ZAP_ENDPOINT = "inproc://zeromq.zap.01"
_POLL_MS = 100
_REMEMBERED = 4096  # refused (address, key) pairs remembered so each is logged once


class ZapHandler:
    def __init__(self, context: zmq.Context, policy: ZapPolicy, node: str = "-",
                 on_decision: Callable[[ZapDecision], None] | None = None) -> None:
        self.context = context
        self.policy = policy
        self.on_decision = on_decision
        self.log = logger.bind(actor="zap", node=node)
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._refused: set[tuple[str, str, str]] = set()
        self._thread = threading.Thread(target=self._run, name=f"zap-{node}", daemon=True)

    def start(self, timeout_s: float = 10.0) -> ZapHandler:
        self._thread.start()
        if not self._ready.wait(timeout_s) or self._error is not None:
            raise RuntimeError(f"the ZAP handler did not start: {self._error}")
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)

    def __enter__(self) -> ZapHandler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        try:
            sock = self.context.socket(zmq.REP)
            sock.linger = 0
            sock.bind(ZAP_ENDPOINT)
        except zmq.ZMQError as exc:
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            while not self._stop.is_set():
                if not sock.poll(_POLL_MS):
                    continue
                frames = sock.recv_multipart()
                reply, decision = self.policy.handle(frames)
                sock.send_multipart(reply)
                self._report(decision)
        finally:
            sock.close()

    def _report(self, decision: ZapDecision) -> None:
        key = z85_key(decision.public_key) if decision.public_key else "-"
        if decision.allowed:
            self.log.debug("CURVE peer {} admitted: {} ({})", decision.address, decision.reason,
                           key)
        else:
            seen = (decision.address, key, decision.reason)
            if seen in self._refused:
                self.log.debug("CURVE peer {} refused again: {}", decision.address,
                               decision.reason)
            else:
                if len(self._refused) >= _REMEMBERED:
                    self._refused.clear()
                self._refused.add(seen)
                self.log.warning("CURVE peer {} refused: {} (mechanism {}, key {})",
                                 decision.address, decision.reason, decision.mechanism, key)
        if self.on_decision is not None:
            self.on_decision(decision)

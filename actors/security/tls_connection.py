"""One TLS connection without a socket: bytes in from the wire, bytes out to it.

:class:`TlsConnection` wraps ``ssl.SSLObject`` over two ``ssl.MemoryBIO``.
The owner (the Processor, in its poll loop) feeds it what the socket read
(:meth:`receive_data`), writes out whatever :meth:`data_to_send` returns,
and never blocks on it: the handshake advances only as far as the bytes
that arrived allow, so a slow or silent client costs nothing but its entry
in the connection table.

Once :attr:`handshake_complete`, application bytes go through
:meth:`send` (encrypted into the outgoing buffer) and :meth:`read` /
:meth:`read_into` (decrypted from what arrived). Any failure raises
:class:`TlsError` once, with a one-line reason fit for the log; the
connection is then dead except that :meth:`data_to_send` may still hold the
TLS alert, which the owner should flush before it closes the socket, so the
client learns why.
"""

from __future__ import annotations

import ssl
from enum import Enum

from actors.security.tls import ANONYMOUS, principal_of_certificate

_TLS_HANDSHAKE_RECORD = 0x16
_READ_CHUNK = 64 * 1024


class TlsError(Exception):
    """The TLS session failed (handshake refused, bad record, peer's alert); one-line message."""


class TlsState(Enum):
    HANDSHAKING = "handshaking"
    ESTABLISHED = "established"
    CLOSED = "closed"   # close_notify received or sent
    FAILED = "failed"


def _reason(exc: ssl.SSLError) -> str:
    """OpenSSL's reason in words: 'certificate verify failed: certificate has expired'."""
    if isinstance(exc, ssl.SSLCertVerificationError) and exc.verify_message:
        return f"certificate verify failed: {exc.verify_message}"
    reason = (exc.reason or str(exc)).lower().replace("_", " ")
    return reason


class TlsConnection:
    """Server side of one TLS connection, driven by bytes (no socket, no clock, no threads)."""

    def __init__(self, context: ssl.SSLContext, peer: str = "?") -> None:
        self.peer = peer
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self.state = TlsState.HANDSHAKING
        self.principal = ANONYMOUS
        self.version: str | None = None  # negotiated, once established: "TLSv1.3"
        self.cipher: str | None = None   # OpenSSL's name of the negotiated suite
        self.bytes_received = 0
        self._first_byte_checked = False

    # ------------------------------------------------------------ wire side
    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Bytes the socket read; an empty ``data`` means the peer closed its side."""
        if self.state in (TlsState.FAILED, TlsState.CLOSED):
            return
        if not data:
            self._incoming.write_eof()
        else:
            if not self._first_byte_checked:
                self._first_byte_checked = True
                if data[0] != _TLS_HANDSHAKE_RECORD:
                    self.state = TlsState.FAILED
                    raise TlsError(
                        f"TLS handshake with {self.peer} failed: the client did not start a "
                        f"TLS handshake (first byte 0x{data[0]:02x}; a plaintext client on "
                        f"a TLS listener?)")
            self.bytes_received += len(data)
            self._incoming.write(data)
        if self.state is TlsState.HANDSHAKING:
            self._advance_handshake()

    def data_to_send(self) -> bytes:
        """Everything waiting to go out on the socket (handshake, records, alerts)."""
        return self._outgoing.read() if self._outgoing.pending else b""

    @property
    def wants_write(self) -> bool:
        return self._outgoing.pending > 0

    # ------------------------------------------------------------ handshake
    @property
    def handshake_complete(self) -> bool:
        return self.state is TlsState.ESTABLISHED

    def _advance_handshake(self) -> None:
        try:
            self._tls.do_handshake()
        except ssl.SSLWantReadError:
            if not self._incoming.eof:
                return
            self.state = TlsState.FAILED
            raise TlsError(f"TLS handshake with {self.peer} failed: the client closed the "
                           f"connection during the handshake") from None
        except ssl.SSLEOFError:
            self.state = TlsState.FAILED
            raise TlsError(f"TLS handshake with {self.peer} failed: the client closed the "
                           f"connection during the handshake") from None
        except ssl.SSLError as exc:
            self.state = TlsState.FAILED
            raise TlsError(f"TLS handshake with {self.peer} failed: {_reason(exc)}") from None
        self.state = TlsState.ESTABLISHED
        self.principal = principal_of_certificate(self._tls.getpeercert(binary_form=True))
        self.version = self._tls.version()
        cipher = self._tls.cipher()
        self.cipher = cipher[0] if cipher else None

    # ---------------------------------------------------- application side
    def send(self, data: bytes | bytearray | memoryview) -> None:
        """Encrypt application bytes into the outgoing buffer (:meth:`data_to_send`)."""
        if self.state is not TlsState.ESTABLISHED:
            raise TlsError(f"TLS connection with {self.peer} is {self.state.value}: "
                           f"cannot send application data")
        view = memoryview(data)
        while view:
            try:
                sent = self._tls.write(view)
            except ssl.SSLError as exc:
                self.state = TlsState.FAILED
                raise TlsError(f"TLS write to {self.peer} failed: {_reason(exc)}") from None
            view = view[sent:]

    def read(self, max_bytes: int = _READ_CHUNK) -> bytes:
        """Decrypted bytes that have arrived (b"" when none are complete yet)."""
        buffer = bytearray(max_bytes)
        size = self.read_into(memoryview(buffer))
        return bytes(buffer[:size])

    def read_into(self, buffer: memoryview) -> int:
        """Decrypt into ``buffer``; the number of bytes written (0: nothing complete yet).

        The peer's close_notify, or its end of the stream, moves the connection to
        CLOSED and returns 0.
        """
        if self.state is not TlsState.ESTABLISHED or not len(buffer):
            return 0
        try:
            size: int = self._tls.read(len(buffer), buffer)  # type: ignore[assignment]
        except ssl.SSLWantReadError:
            if self._incoming.eof:
                self.state = TlsState.CLOSED
            return 0
        except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
            # close_notify, or the peer simply went away (most clients never send one)
            self.state = TlsState.CLOSED
            return 0
        except ssl.SSLError as exc:
            self.state = TlsState.FAILED
            raise TlsError(f"TLS read from {self.peer} failed: {_reason(exc)}") from None
        if size == 0:  # ssl reports the peer's close_notify as a read of nothing
            self.state = TlsState.CLOSED
        return size

    def close(self) -> None:
        """Queue a close_notify (flush :meth:`data_to_send` before closing the socket)."""
        if self.state is TlsState.ESTABLISHED:
            try:
                self._tls.unwrap()
            except (ssl.SSLWantReadError, ssl.SSLError):
                pass
        if self.state is not TlsState.FAILED:
            self.state = TlsState.CLOSED

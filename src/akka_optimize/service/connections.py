"""HTTP connections that cannot be held open for ever by a client that stops sending.

uvicorn times out an idle keep-alive connection only after a response, so a
client that opens a connection and sends nothing, half a request head or half a
body holds a socket and a request task indefinitely. :class:`TimedH11Protocol`
closes a connection when the client has sent nothing for ``read_timeout``
seconds while the service waits on it (no request yet, or a body still coming),
and when a request head is not complete ``read_timeout`` seconds after its first
byte, however the client trickles it (one byte every few seconds restarts the
silence clock, not this deadline; issue 48 item 7). A head larger than h11's
limit (16 KiB by default) is answered ``431 Request Header Fields Too Large``
and its remaining bytes are read and dropped until the client closes, so the
client reads the answer instead of a reset. A request the service is still
working on is never cut: once the client has sent the whole request, only
uvicorn's keep-alive timeout applies.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import DEFAULT_MAX_INCOMPLETE_EVENT_SIZE, H11Protocol

#: Seconds a client may stay silent while the service waits for its request.
DEFAULT_READ_TIMEOUT_S = 30.0


def read_timeout_s() -> float:
    """``AKKA_OPTIMIZE_READ_TIMEOUT`` (seconds) or :data:`DEFAULT_READ_TIMEOUT_S`."""
    return float(os.environ.get("AKKA_OPTIMIZE_READ_TIMEOUT") or DEFAULT_READ_TIMEOUT_S)


class TimedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a read timeout (module docstring)."""

    read_timeout: float = DEFAULT_READ_TIMEOUT_S

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._idle: asyncio.TimerHandle | None = None
        self._head: asyncio.TimerHandle | None = None  # the request head's deadline
        self._dropping = False  # a 431 was sent: what the client still sends is dropped
        self._head_limit = self.config.h11_max_incomplete_event_size or (
            DEFAULT_MAX_INCOMPLETE_EVENT_SIZE
        )

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()
        self._arm_head()

    def data_received(self, data: bytes) -> None:
        self._arm()
        if self._dropping:
            return
        if self.conn.their_state is h11.IDLE:
            if self._head is None:  # the first bytes of a request on a kept-alive connection
                self._arm_head()
            if self._head_too_large(data):
                self._refuse_head()
                return
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE and self._head is not None:
            self._head.cancel()  # the head is complete
            self._head = None

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._head is not None:
            self._head.cancel()
            self._head = None
        super().connection_lost(exc)

    def _arm_head(self) -> None:
        self._head = self.loop.call_later(self.read_timeout, self._head_expired)

    def _head_expired(self) -> None:
        self._head = None
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self.transport.close()  # no whole request head within the deadline

    def _head_too_large(self, data: bytes) -> bool:
        """Whether the head being received passes the limit without ending (h11 would
        raise "Receive buffer too long" and uvicorn answer 400 and reset)."""
        seen = self.conn.trailing_data[0] + data
        return len(seen) > self._head_limit and b"\r\n\r\n" not in seen[: self._head_limit + 4]

    def _refuse_head(self) -> None:
        body = f"The request head is larger than {self._head_limit} bytes.".encode()
        self.transport.write(
            b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
            b"content-type: text/plain; charset=utf-8\r\nconnection: close\r\n"
            b"content-length: %d\r\n\r\n%s" % (len(body), body)
        )
        self._dropping = True  # read on until the client closes or stays silent
        if self.transport.can_write_eof():
            self.transport.write_eof()

    def _disarm(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None

    def _arm(self) -> None:
        self._disarm()
        self._idle = self.loop.call_later(self.read_timeout, self._expire)

    def _expire(self) -> None:
        self._idle = None
        if self.transport.is_closing():
            return
        if self.conn.their_state is h11.DONE:
            return  # the whole request is in; the service is answering it
        if self.flow.read_paused:
            self._arm()  # the service is not reading yet; the client is not to blame
            return
        self.transport.close()


def protocol_class() -> type[TimedH11Protocol]:
    """:class:`TimedH11Protocol` with the configured read timeout."""
    return type("TimedH11Protocol", (TimedH11Protocol,), {"read_timeout": read_timeout_s()})

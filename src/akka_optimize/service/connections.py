"""HTTP connections that cannot be held open for ever by a client that stops sending.

uvicorn times out an idle keep-alive connection only after a response, so a
client that opens a connection and sends nothing, half a request head or half a
body holds a socket and a request task indefinitely. :class:`TimedH11Protocol`
closes a connection when the client has sent nothing for ``read_timeout``
seconds while the service waits on it (no request yet, or a body still coming).
A request the service is still working on is never cut: once the client has sent
the whole request, only uvicorn's keep-alive timeout applies.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

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

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        self._arm()
        super().data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

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

"""Limits on what one HTTP connection may cost the replica: body size, body time, header time.

- ``RequestLimits`` (pure ASGI middleware): a body larger than ``max_body_bytes`` is a 413 (the
  ``Content-Length`` is checked before reading; a chunked body is counted as it arrives), and a
  body that has not arrived completely ``body_timeout_s`` after the request started is a 408 —
  both in OpenAI's error shape with ``Connection: close``, so the server drops the connection
  instead of waiting for the rest. The time is a deadline for the whole body, not per chunk: a
  client trickling one byte a second cannot stretch it.
- ``header_timeout_protocol(header_timeout_s)``: uvicorn's h11 protocol, closing a connection whose
  request line and headers are not complete ``header_timeout_s`` after the connection opened or
  its previous response ended. Uvicorn alone closes only idle keep-alive connections, and any byte
  restarts that clock, so a client sending a header byte every few seconds would hold its
  connection (and its slot) forever.

Deliberately left out: limits per client address (a reverse proxy's job) and response-side
timeouts (a streamed completion may legitimately take minutes).
"""

from __future__ import annotations

import asyncio
import time

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from deploy.replica.errors import error_response

_CLOSE = {"Connection": "close"}


class _LimitError(HTTPException):
    """Raised from ``receive`` inside a route: FastAPI passes HTTPExceptions through its body
    parsing, and deploy/replica/errors.py answers them in OpenAI's shape (``code`` included)."""

    def __init__(self, status: int, message: str, code: str) -> None:
        super().__init__(status, message, headers=_CLOSE)
        self.code = code


def _too_large(limit: int) -> _LimitError:
    return _LimitError(413, f"request body exceeds this replica's limit of {limit} bytes",
                       "request_too_large")


def _too_slow(timeout_s: float) -> _LimitError:
    return _LimitError(408, f"request body not received within {timeout_s:g}s",
                       "request_timeout")


class RequestLimits:
    """413 for a body over ``max_body_bytes``, 408 for one not complete after ``body_timeout_s``."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int, body_timeout_s: float) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
            error = _too_large(self.max_body_bytes)
            response = error_response(413, error.detail, code=error.code, headers=_CLOSE)
            await response(scope, receive, send)
            return
        deadline = time.monotonic() + self.body_timeout_s
        received = 0
        body_done = False

        async def limited_receive() -> Message:
            nonlocal received, body_done
            if body_done:  # after the body only a disconnect can come: no deadline
                return await receive()
            left = deadline - time.monotonic()
            try:
                message = await asyncio.wait_for(receive(), timeout=max(left, 0.0))
            except TimeoutError:
                raise _too_slow(self.body_timeout_s) from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    raise _too_large(self.max_body_bytes)
                body_done = not message.get("more_body", False)
            return message

        await self.app(scope, limited_receive, send)


def header_timeout_protocol(header_timeout_s: float):
    """A uvicorn h11 protocol class (``uvicorn.run(..., http=cls)``) with a header deadline."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderTimeoutProtocol(H11Protocol):
        """Closes the connection if a request's head is not complete in time (see module)."""

        _header_timer: asyncio.TimerHandle | None = None

        def _arm(self) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(header_timeout_s, self._on_header_timeout)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _on_header_timeout(self) -> None:
            self._header_timer = None
            if self.cycle is None or self.cycle.response_complete:  # still waiting for a head
                if not self.transport.is_closing():
                    self.transport.close()

        def connection_made(self, transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def handle_events(self) -> None:
            before = self.cycle
            super().handle_events()
            if self.cycle is not before:  # a request head was parsed: its body has its own limit
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and self.conn.our_state is not h11.MUST_CLOSE:
                self._arm()

    return HeaderTimeoutProtocol

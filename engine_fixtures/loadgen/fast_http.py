"""One HTTP/1.1 keep-alive connection of the ``fast`` transport: an asyncio Protocol around the
httptools (llhttp) response parser, one request in flight at a time.

Contract: ``send`` writes a pre-serialised head + body and arms a ``timeout_s`` timer; exactly one raw
row ``(index, intended, sent, end, token_times, usage_tokens, status, error)`` is then handed to
``on_done(conn, row)``, also on failure. Body bytes (chunked or Content-Length, decoded by httptools)
go straight into ``SseParser`` stamped with the ``perf_counter`` of the read that brought them. Error
kinds match the aiohttp transport: ``http_status`` (with a body snippet), ``stream_cut``,
``malformed_sse``/``server_error``/``no_done`` (from the SSE parser), ``timeout``, ``client`` (not
valid HTTP). After any failure, or a response without keep-alive, the connection is closed
(``alive`` is False) and the caller opens a new one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import httptools

from engine_fixtures.loadgen.sse import SseError, SseParser

SNIPPET_BYTES = 512
Row = tuple[Any, ...]


def request_head(path: str, host: str, body_length: int) -> bytes:
    """Request line + headers of one streaming chat POST, ready to write."""
    return (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Accept: text/event-stream\r\nContent-Length: {body_length}\r\n\r\n"
    ).encode("latin-1")


class FastConnection(asyncio.Protocol):
    """A keep-alive connection; ``alive`` until closed by either side; ``busy`` while a request is in flight."""

    def __init__(self, on_done: Callable[[FastConnection, Row], None], timeout_s: float) -> None:
        self.on_done = on_done
        self.timeout_s = timeout_s
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.alive = False
        self.busy = False
        self.now = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._begin(-1, 0.0, 0.0)

    def _begin(self, index: int, intended: float, sent: float) -> None:
        self.index = index
        self.intended = intended
        self.sent = sent
        self.sse = SseParser()
        self.status: int | None = None
        self.reason = b""
        self.snippet = b""
        self.complete = False
        self.keep_alive = True

    # -- the caller's side ---------------------------------------------------------------------------
    def send(self, index: int, intended: float, sent: float, head: bytes, body: bytes) -> None:
        """Start request ``index``; ``sent`` is when it was handed to this connection."""
        assert self.alive
        assert not self.busy
        assert self.transport is not None
        self._begin(index, intended, sent)
        self.busy = True
        self._timer = asyncio.get_running_loop().call_later(self.timeout_s, self._on_timeout)
        self.transport.writelines((head, body))

    def close(self) -> None:
        self.alive = False
        if self.transport is not None:
            self.transport.abort()

    # -- asyncio callbacks -----------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.alive = True

    def connection_lost(self, exc: Exception | None) -> None:
        self.alive = False
        self.transport = None
        if self.busy:
            what = f"{type(exc).__name__}: {exc}" if exc is not None else "ServerDisconnected: connection closed"
            self._fail(("stream_cut", f"{what} before the response ended, after {self.sse.chunks} chunks", ""))

    def data_received(self, data: bytes) -> None:
        if not self.busy:
            self.close()  # bytes nobody asked for: the stream is out of step, never reuse it
            return
        self.now = time.perf_counter()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            cause = exc.__context__
            if not isinstance(cause, SseError):
                raise
            self._fail((cause.kind, str(cause), cause.snippet))
            return
        except httptools.HttpParserError as exc:
            snippet = data[:200].decode("latin-1")
            self._fail(("client", f"{type(exc).__name__}: not a valid HTTP response ({exc})", snippet))
            return
        if self.complete:
            self._finish()
        elif self.status is not None and self.status != 200 and len(self.snippet) >= SNIPPET_BYTES:
            self.keep_alive = False  # enough of an error body; do not wait for the rest
            self._finish()

    def eof_received(self) -> bool:
        return False  # close the transport; connection_lost reports a cut if a request was in flight

    # -- httptools callbacks (called inside feed_data) ---------------------------------------------------
    def on_status(self, reason: bytes) -> None:
        self.reason += reason

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.keep_alive = self.parser.should_keep_alive()

    def on_body(self, body: bytes) -> None:
        if self.status == 200:
            self.sse.feed(body, self.now)
        elif len(self.snippet) < SNIPPET_BYTES:
            self.snippet += body[: SNIPPET_BYTES - len(self.snippet)]

    def on_message_complete(self) -> None:
        self.complete = True

    # -- endings -------------------------------------------------------------------------------------
    def _on_timeout(self) -> None:
        self._timer = None
        if self.busy:
            self._fail(("timeout", f"TimeoutError: no complete answer within request_timeout_s={self.timeout_s:g}", ""))

    def _finish(self) -> None:
        error: tuple[str, str, str] | None = None
        if self.status != 200:
            reason = self.reason.decode("latin-1")
            error = ("http_status", f"HTTP {self.status} {reason}", self.snippet.decode("utf-8", "replace"))
        else:
            try:
                self.sse.finish()
            except SseError as exc:
                error = (exc.kind, str(exc), exc.snippet)
        if error is not None or not self.keep_alive:
            self.close()
        self._end(error)

    def _fail(self, error: tuple[str, str, str]) -> None:
        self.close()
        self._end(error)

    def _end(self, error: tuple[str, str, str] | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.busy = False
        end = time.perf_counter()
        sse = self.sse
        row = (self.index, self.intended, self.sent, end, sse.token_times, sse.usage_tokens, self.status, error)
        self.on_done(self, row)

"""Incremental parser of an OpenAI chat-completions SSE stream, cheap enough for the hot path.

Contract: ``feed(data, t)`` takes bytes as they arrive with their arrival time; every ``data:``
line must be ``[DONE]`` or a JSON object (checked structurally: ``{...}``; only the usage chunk
and error objects are fully decoded, so the client does not pay ``json.loads`` per token). A
content chunk is one whose ``delta.content`` is a non-empty string; its arrival time is recorded.
``finish()`` raises unless the stream ended with ``data: [DONE]`` and no dangling partial line.
"""

from __future__ import annotations

import json

_CONTENT_KEY = b'"content":'
_SNIPPET = 200


class SseError(ValueError):
    """The stream broke the SSE / OpenAI chunk format; ``kind`` is ``malformed_sse``, ``server_error``
    or ``no_done``; ``snippet`` is the offending bytes (truncated)."""

    def __init__(self, kind: str, message: str, snippet: bytes = b"") -> None:
        super().__init__(message)
        self.kind = kind
        self.snippet = snippet[:_SNIPPET].decode("utf-8", "replace")


class SseParser:
    """Accumulates one response: ``token_times``, ``chunks`` (data events), ``usage_tokens`` (None when
    the server sent no usage), ``done``."""

    __slots__ = ("_buf", "chunks", "done", "token_times", "usage_tokens")

    def __init__(self) -> None:
        self._buf = b""
        self.token_times: list[float] = []
        self.chunks = 0
        self.usage_tokens: int | None = None
        self.done = False

    def feed(self, data: bytes, t: float) -> None:
        buf = self._buf + data if self._buf else data
        lines = buf.split(b"\n")
        self._buf = lines.pop()
        for line in lines:
            if not line or line == b"\r":
                continue
            if line.startswith(b"data:"):
                self._event(line[5:].strip(), t)
            elif line.startswith((b":", b"event:", b"id:", b"retry:")):
                continue
            else:
                raise SseError("malformed_sse", "line is not an SSE field (expected 'data: ...')", line)

    def _event(self, payload: bytes, t: float) -> None:
        if payload == b"[DONE]":
            self.done = True
            return
        if self.done:
            raise SseError("malformed_sse", "data after [DONE]", payload)
        if not (payload.startswith(b"{") and payload.endswith(b"}")):
            raise SseError("malformed_sse", "data is not a JSON object", payload)
        self.chunks += 1
        if payload.startswith(b'{"error"') or b'"object":"error"' in payload:
            raise SseError("server_error", "server sent an error event mid-stream", payload)
        pos = payload.find(_CONTENT_KEY)
        if pos >= 0:
            pos += len(_CONTENT_KEY)
            if payload[pos : pos + 1] == b" ":
                pos += 1
            if payload[pos : pos + 1] == b'"' and payload[pos + 1 : pos + 2] != b'"':
                self.token_times.append(t)
        if b'"usage":{' in payload or b'"usage": {' in payload:
            self._usage(payload)

    def _usage(self, payload: bytes) -> None:
        try:
            usage = json.loads(payload)["usage"]
            self.usage_tokens = int(usage["completion_tokens"])
        except (ValueError, KeyError, TypeError) as exc:
            raise SseError("malformed_sse", f"usage chunk is not valid: {exc}", payload) from None

    def finish(self) -> None:
        """Call at end of stream; raises ``SseError`` if it was incomplete."""
        if self._buf.strip():
            raise SseError("malformed_sse", "stream ended inside a line", self._buf)
        if not self.done:
            raise SseError("no_done", f"stream ended without 'data: [DONE]' after {self.chunks} chunks")

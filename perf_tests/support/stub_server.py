"""Zero-work streaming chat-completions server for the load generator's OWN self-tests (never a product
stand-in for an engine). Raw asyncio protocol on uvloop, HTTP/1.1 keep-alive, chunked SSE.

Answers ``POST .../chat/completions`` with a role chunk, ``max_tokens`` content chunks, a usage chunk
and ``data: [DONE]``; ``GET /health`` and ``GET /v1/models`` with 200. The first content chunk is
sent ``ttft_ms`` after the request arrived, then one chunk every ``itl_ms`` (absolute schedule, no
drift). Query parameters override per request: ``ttft_ms`` (a comma list cycles over the requests the server
has seen, so a closed loop's slots fall out of step), ``itl_ms``, ``fail`` and ``every`` (fail only every K-th
request the server has seen). ``fail`` modes: ``status:<code>``, ``cut``
(close mid-stream), ``malformed`` (a non-SSE line mid-stream), ``nodone`` (no ``[DONE]``),
``nousage`` (no usage chunk; valid), ``short`` (usage reports one token less than sent). The same
keys work as ``X-Stub-<Key>`` headers. ``GET /stub/stats`` returns and clears the server-side
arrival/completion times (``time.perf_counter``) of chat requests and the count of connections
opened, so a benchmark can judge any client from the server's side.

Run: ``python -m perf_tests.support.stub_server --port 0 [--cpu 1] [--ttft-ms 0] [--itl-ms 0]``;
it prints ``LISTENING <port>`` on stdout when ready.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import time
from urllib.parse import parse_qsl, urlsplit

_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length:\s*(\d+)", re.IGNORECASE)
_STUB_HEADER = re.compile(rb"\r\nx-stub-([a-z_]+):\s*([^\r]*)", re.IGNORECASE)
_MAX_TOKENS = re.compile(rb'"max_(?:completion_)?tokens":\s*(\d+)')
_SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n"
)
_PREFIX = b'{"id":"stub","object":"chat.completion.chunk","choices":'
_ROLE = _PREFIX + b'[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}],"usage":null}'
_TOKEN = _PREFIX + b'[{"index":0,"delta":{"role":null,"content":"tok "},"finish_reason":null}],"usage":null}'
_USAGE = _PREFIX + b'[],"usage":{"prompt_tokens":8,"completion_tokens":%d,"total_tokens":%d}}'


def _chunk(payload: bytes) -> bytes:
    event = b"data: " + payload + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(event), event)


_ROLE_CHUNK = _chunk(_ROLE)
_TOKEN_CHUNK = _chunk(_TOKEN)
_DONE_CHUNK = _chunk(b"[DONE]")
_END = b"0\r\n\r\n"


class Settings:
    def __init__(self, ttft_ms: float, itl_ms: float) -> None:
        self.ttft_ms = ttft_ms
        self.itl_ms = itl_ms
        self.seen = 0
        self.arrivals: list[float] = []
        self.completions: list[float] = []
        self.connections = 0


class StubProtocol(asyncio.Protocol):
    """One connection: parses request head + Content-Length body, answers one request at a time."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.busy = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.settings.connections += 1

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self.buf += data
        self._next()

    def _next(self) -> None:
        while not self.busy and self.transport is not None:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end]
            match = _CONTENT_LENGTH.search(head)
            length = int(match.group(1)) if match else 0
            if len(self.buf) < end + 4 + length:
                return
            body = self.buf[end + 4 : end + 4 + length]
            self.buf = self.buf[end + 4 + length :]
            self._answer(head, body)

    def _answer(self, head: bytes, body: bytes) -> None:
        assert self.transport is not None
        request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        method, target = [*request_line.split(" "), "", ""][:2]
        parts = urlsplit(target)
        if method == "GET" and parts.path.endswith("/health"):
            self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok")
            return
        if method == "GET" and parts.path == "/stub/stats":
            settings = self.settings
            stats = {
                "arrivals": settings.arrivals,
                "completions": settings.completions,
                "connections": settings.connections,
            }
            settings.arrivals, settings.completions, settings.connections = [], [], 0
            self._plain(200, json.dumps(stats).encode())
            return
        if method == "GET" and parts.path.endswith("/v1/models"):
            self._plain(200, b'{"object":"list","data":[{"id":"default","object":"model"}]}')
            return
        if not parts.path.endswith("/chat/completions"):
            self._plain(404, b'{"error":"not found"}')
            return
        opts = {k.decode().lower(): v.decode() for k, v in _STUB_HEADER.findall(head)}
        opts.update(parse_qsl(parts.query))
        self.settings.seen += 1
        self.settings.arrivals.append(time.perf_counter())
        fail = opts.get("fail", "")
        every = int(opts.get("every", "1"))
        if fail and self.settings.seen % every != 0:
            fail = ""
        match = _MAX_TOKENS.search(body)
        tokens = int(match.group(1)) if match else 16
        if fail.startswith("status:"):
            self._plain(
                int(fail.split(":", 1)[1]),
                b'{"object":"error","message":"stub failure","code":%s}' % (fail.split(":", 1)[1].encode()),
            )
            return
        ttfts = opts.get("ttft_ms", str(self.settings.ttft_ms)).split(",")
        ttft = float(ttfts[self.settings.seen % len(ttfts)]) / 1000.0
        itl = float(opts.get("itl_ms", self.settings.itl_ms)) / 1000.0
        self.transport.write(_SSE_HEAD)
        if ttft == 0 and itl == 0:
            self.transport.write(b"".join(self._events(tokens, fail)))
            self._finish(fail)
            return
        self.busy = True
        loop = asyncio.get_running_loop()
        events = self._events(tokens, fail)
        start = loop.time()
        # The role chunk goes with the first token (as SGLang sends it only once output exists).
        first = events.pop(0) + events.pop(0)
        batches = [first, *events[: tokens - 1]]
        batches[-1] += b"".join(events[tokens - 1 :])
        # Chained, not all scheduled at once: each send schedules the next, so order cannot change.
        loop.call_at(start + ttft, self._send, batches, 0, start + ttft, itl, fail)

    def _events(self, tokens: int, fail: str) -> list[bytes]:
        events = [_ROLE_CHUNK] + [_TOKEN_CHUNK] * tokens
        if fail == "cut":
            return events[: 1 + max(1, tokens // 2)]
        if fail == "malformed":
            events.insert(1 + max(1, tokens // 2), b"%x\r\n%s\r\n" % (len(b"garbage\n\n"), b"garbage\n\n"))
        if fail != "nousage":
            sent = tokens - 1 if fail == "short" else tokens
            events.append(_chunk(_USAGE % (sent, sent + 8)))
        if fail != "nodone":
            events.append(_DONE_CHUNK)
        return events

    def _send(self, batches: list[bytes], i: int, first_at: float, itl: float, fail: str) -> None:
        if self.transport is None:
            return
        self.transport.write(batches[i])
        if i + 1 < len(batches):
            asyncio.get_running_loop().call_at(
                first_at + (i + 1) * itl, self._send, batches, i + 1, first_at, itl, fail
            )
            return
        self._finish(fail)
        self.busy = False
        self._next()

    def _finish(self, fail: str) -> None:
        assert self.transport is not None
        self.settings.completions.append(time.perf_counter())
        if fail == "cut":
            self.transport.close()
            return
        self.transport.write(_END)

    def _plain(self, status: int, body: bytes) -> None:
        assert self.transport is not None
        self.transport.write(
            b"HTTP/1.1 %d Stub\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
            b"Connection: keep-alive\r\n\r\n%s" % (status, len(body), body)
        )


async def serve(host: str, port: int, settings: Settings) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: StubProtocol(settings), host, port, backlog=4096)
    bound = server.sockets[0].getsockname()[1]
    sys.stdout.write(f"LISTENING {bound}\n")
    sys.stdout.flush()
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--cpu", type=int, default=None, help="pin the server to this CPU")
    parser.add_argument("--ttft-ms", type=float, default=0.0)
    parser.add_argument("--itl-ms", type=float, default=0.0)
    args = parser.parse_args(argv)
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    import uvloop

    uvloop.run(serve(args.host, args.port, Settings(args.ttft_ms, args.itl_ms)))


if __name__ == "__main__":
    main()

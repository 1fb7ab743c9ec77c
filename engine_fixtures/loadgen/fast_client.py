"""The ``fast`` HTTP client's scheduler (``WorkloadSpec.http_client="fast"``, the default): closed loop
with one persistent connection per concurrency slot, open loop with a pool of idle keep-alive
connections (a new one when none is idle). No coroutine per request: a finished response's callback
sends the slot's next request directly. Connections are opened lazily with ``connect_timeout_s`` and
all of them are closed when the run ends, also on error or cancellation.

Plain ``http://`` HTTP/1.1 only (no TLS, redirects, proxies or close-delimited bodies); for those use
``http_client="aiohttp"``. A connect failure is a ``connect`` error (``timeout`` if it took longer
than ``connect_timeout_s``) for the request that needed the connection; the next request retries.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from engine_fixtures.errors import ConfigError
from engine_fixtures.loadgen.arrivals import poisson_arrivals
from engine_fixtures.loadgen.fast_http import FastConnection, Row, request_head
from engine_fixtures.loadgen.workload import WorkloadSpec


class FastDriver:
    """Runs every body of ``spec`` against ``url``; appends one raw row per request (see ``client``)."""

    def __init__(self, url: str, spec: WorkloadSpec, bodies: Sequence[bytes]) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ConfigError(f"url={url!r}: http_client='fast' speaks plain http:// only; use http_client='aiohttp'")
        self.host = parts.hostname
        self.port = parts.port or 80
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.spec = spec
        self.bodies = bodies
        self.heads = [request_head(path, parts.netloc, len(body)) for body in bodies]
        self.conns: set[FastConnection] = set()
        self.pending: set[asyncio.Task[None]] = set()
        self.idle: list[FastConnection] = []
        self.next_index = 0
        self.finished = 0

    async def run(self, rows: list[Row], counter: Any, exhausted: list[float]) -> None:
        self.rows, self.counter, self.exhausted = rows, counter, exhausted
        loop = asyncio.get_running_loop()
        self.loop = loop
        self.done: asyncio.Future[None] = loop.create_future()
        try:
            if self.spec.concurrency is not None:
                freed = time.perf_counter()
                for _ in range(self.spec.concurrency):
                    self._next(None, freed)
            else:
                await self._arrivals()
            await self.done
        finally:
            for task in self.pending:
                task.cancel()
            for conn in self.conns:
                conn.close()

    async def _arrivals(self) -> None:
        spec = self.spec
        assert spec.request_rate is not None
        arrivals = poisson_arrivals(spec.request_rate, spec.total_requests, spec.seed)
        start = time.perf_counter()
        for index, offset in enumerate(arrivals.tolist()):
            due = start + offset
            wait = due - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)  # the arrival schedule itself, not a wait for a condition
            if self.done.done():
                return  # a callback failed; run() re-raises it
            conn = None
            while self.idle and conn is None:
                candidate = self.idle.pop()
                conn = candidate if candidate.alive and not candidate.busy else None
            self._start(conn, index, due, time.perf_counter())

    def _next(self, conn: FastConnection | None, freed: float) -> None:
        """Closed loop: the slot of ``conn`` (None: needs a connection) takes the next request or retires."""
        index = self.next_index
        if index >= self.spec.total_requests:
            if not self.exhausted:
                self.exhausted.append(time.perf_counter())
            return
        self.next_index = index + 1
        self._start(conn, index, freed, time.perf_counter())

    def _start(self, conn: FastConnection | None, index: int, intended: float, sent: float) -> None:
        """Send request ``index`` (on ``conn``, or on a new connection); ``sent`` (now) is its recorded send time."""
        if conn is not None and conn.alive:
            conn.send(index, intended, sent, self.heads[index], self.bodies[index])
            return
        task = self.loop.create_task(self._connect_and_send(index, intended, sent))
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)

    async def _connect_and_send(self, index: int, intended: float, sent: float) -> None:
        spec = self.spec
        try:
            _, conn = await asyncio.wait_for(
                self.loop.create_connection(
                    lambda: FastConnection(self._on_done, spec.request_timeout_s), self.host, self.port
                ),
                spec.connect_timeout_s,
            )
        except asyncio.TimeoutError:
            error = (
                "timeout",
                f"TimeoutError: connect to {self.host}:{self.port} took over connect_timeout_s="
                f"{spec.connect_timeout_s:g}",
                "",
            )
        except OSError as exc:
            error = ("connect", f"{type(exc).__name__}: cannot connect to {self.host}:{self.port}: {exc}", "")
        else:
            self.conns.add(conn)
            conn.send(index, intended, sent, self.heads[index], self.bodies[index])
            return
        self._on_done(None, (index, intended, sent, time.perf_counter(), [], None, None, error))

    def _on_done(self, conn: FastConnection | None, row: Row) -> None:
        try:
            self.rows.append(row)
            self.counter.value += 1
            self.finished += 1
            if conn is not None and not conn.alive:
                self.conns.discard(conn)
                conn = None
            if self.finished == self.spec.total_requests:
                if not self.done.done():
                    self.done.set_result(None)
            elif self.spec.concurrency is not None:
                self._next(conn, row[3])
            elif conn is not None:
                self.idle.append(conn)
        except BaseException as exc:  # a bug here must end the run with its traceback, not hang it
            if not self.done.done():
                self.done.set_exception(exc)
            raise

"""The aiohttp HTTP client (``WorkloadSpec.http_client="aiohttp"``): one ``ClientSession`` with a
keep-alive connector sized to the concurrency, a coroutine per request. Slower per request than the
``fast`` client, but a full HTTP client: use it for TLS (``https://``), redirects or servers that
end bodies by closing the connection."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import aiohttp

from engine_fixtures.loadgen.arrivals import poisson_arrivals
from engine_fixtures.loadgen.sse import SseError, SseParser
from engine_fixtures.loadgen.workload import WorkloadSpec

_HEADERS = {"Content-Type": "application/json", "Accept": "text/event-stream"}
_SNIPPET_BYTES = 512


class AiohttpDriver:
    """Runs every body of ``spec`` against ``url``; appends one raw row per request (see ``client``)."""

    def __init__(self, url: str, spec: WorkloadSpec, bodies: Sequence[bytes]) -> None:
        self.url = url
        self.spec = spec
        self.bodies = bodies

    async def run(self, rows: list[tuple[Any, ...]], counter: Any, exhausted: list[float]) -> None:
        spec, url, bodies = self.spec, self.url, self.bodies
        connector = aiohttp.TCPConnector(
            limit=spec.concurrency or 0, limit_per_host=0, keepalive_timeout=300, ttl_dns_cache=None
        )
        timeout = aiohttp.ClientTimeout(
            total=spec.request_timeout_s, connect=spec.connect_timeout_s, sock_read=spec.request_timeout_s
        )
        async with aiohttp.ClientSession(
            connector=connector, timeout=timeout, auto_decompress=False, raise_for_status=False
        ) as session:

            async def request(index: int, intended: float) -> float:
                sent = time.perf_counter()
                parser = SseParser()
                status: int | None = None
                error: tuple[str, str, str] | None = None
                try:
                    async with session.post(url, data=bodies[index], headers=_HEADERS) as resp:
                        status = resp.status
                        content = resp.content
                        if status != 200:
                            snippet = await content.read(_SNIPPET_BYTES)
                            error = ("http_status", f"HTTP {status} {resp.reason}", snippet.decode("utf-8", "replace"))
                        else:
                            perf = time.perf_counter
                            feed = parser.feed
                            while True:
                                data = await content.readany()
                                if not data:
                                    break
                                feed(data, perf())
                            parser.finish()
                except SseError as exc:
                    error = (exc.kind, str(exc), exc.snippet)
                except aiohttp.ClientConnectorError as exc:
                    error = ("connect", f"{type(exc).__name__}: {exc}", "")
                except (asyncio.TimeoutError, aiohttp.ServerTimeoutError) as exc:
                    error = ("timeout", f"{type(exc).__name__}: no answer within the timeout {exc}", "")
                except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                    error = ("stream_cut", f"{type(exc).__name__}: {exc} after {parser.chunks} chunks", "")
                except aiohttp.ClientError as exc:
                    error = ("client", f"{type(exc).__name__}: {exc}", "")
                end = time.perf_counter()
                rows.append((index, intended, sent, end, parser.token_times, parser.usage_tokens, status, error))
                counter.value += 1
                return end

            if spec.concurrency is not None:
                total = spec.total_requests
                next_index = 0

                async def worker() -> None:
                    nonlocal next_index
                    freed = time.perf_counter()
                    while next_index < total:
                        index = next_index
                        next_index += 1
                        freed = await request(index, freed)
                    if not exhausted:
                        exhausted.append(time.perf_counter())

                await asyncio.gather(*(worker() for _ in range(spec.concurrency)))
                return
            assert spec.request_rate is not None
            arrivals = poisson_arrivals(spec.request_rate, spec.total_requests, spec.seed)
            start = time.perf_counter()
            tasks = set()
            for index, offset in enumerate(arrivals.tolist()):
                due = start + offset
                wait = due - time.perf_counter()
                if wait > 0:
                    await asyncio.sleep(wait)  # the arrival schedule itself, not a wait for a condition
                task = asyncio.ensure_future(request(index, due))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            if tasks:
                await asyncio.gather(*tasks)

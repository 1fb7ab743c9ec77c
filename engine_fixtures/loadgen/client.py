"""The asyncio/aiohttp client: closed and open loops over pre-built bodies (runs inside the load process).

Hot-path rules: bodies are bytes built before the clock, one ``ClientSession`` with a keep-alive
connector sized to the concurrency, raw tuples appended per request, records built after the clock.

Closed-loop scheduling delay is this client's own turnaround (its loop saw a slot free -> the next
request handed to aiohttp). It cannot see time a finished response waited in the socket while the
loop was busy; the event-loop lag probe measures that (also when the process is starved of CPU by
others), and the stub's arrival/completion times show it from the server's side.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
import numpy as np

from engine_fixtures.loadgen.records import RequestError, RequestRecord
from engine_fixtures.loadgen.spec import WorkloadSpec
from engine_fixtures.loadgen.sse import SseError, SseParser

_HEADERS = {"Content-Type": "application/json", "Accept": "text/event-stream"}
_SNIPPET_BYTES = 512
LAG_PROBE_S = 0.05


@dataclass(frozen=True)
class RawRun:
    """What the load process measured. ``exhausted_s``: when a closed-loop worker first found no
    request left (end of the full-concurrency window); ``cpu_s``/``wall_s``: the client process's CPU
    time and wall time over the whole run; ``loop_lag_s``: lateness of a timer probe every
    ``LAG_PROBE_S`` (event-loop lag: busy loop or starved process); ``origin``: the
    ``time.perf_counter()`` value record times are relative to (CLOCK_MONOTONIC on Linux, so
    comparable with other processes' clocks)."""

    records: tuple[RequestRecord, ...]
    exhausted_s: float | None
    wall_s: float
    cpu_s: float
    origin: float = 0.0
    loop_lag_s: tuple[float, ...] = ()


class _Counter:
    """Stand-in for the shared progress counter when none is given."""

    value = 0


def poisson_arrivals(rate: float, count: int, seed: int) -> np.ndarray:
    """Seeded arrival offsets in seconds (exponential gaps, first arrival at 0)."""
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=count)
    gaps[0] = 0.0
    return np.cumsum(gaps)


async def run_client(url: str, spec: WorkloadSpec, bodies: Sequence[bytes], counter: Any = None) -> RawRun:
    """Send every body (warmup first) and return the raw measurement. Never raises for a request error:
    failures are recorded per request."""
    counter = counter if counter is not None else _Counter()
    rows: list[tuple[Any, ...]] = []
    limit = spec.concurrency or 0
    connector = aiohttp.TCPConnector(limit=limit, limit_per_host=0, keepalive_timeout=300, ttl_dns_cache=None)
    timeout = aiohttp.ClientTimeout(
        total=spec.request_timeout_s, connect=spec.connect_timeout_s, sock_read=spec.request_timeout_s
    )
    origin = time.perf_counter()
    cpu0 = time.process_time()
    loop = asyncio.get_running_loop()
    lags: list[float] = []

    def probe(due: float) -> None:
        # How late a timer fires = how long ready work (e.g. a finished response) waits for this loop.
        now = time.perf_counter()
        lags.append(max(0.0, now - due))
        probe_handle[0] = loop.call_later(LAG_PROBE_S, probe, now + LAG_PROBE_S)

    probe_handle = [loop.call_later(LAG_PROBE_S, probe, origin + LAG_PROBE_S)]
    exhausted: list[float] = []
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
        else:
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
    probe_handle[0].cancel()
    wall = time.perf_counter() - origin
    cpu = time.process_time() - cpu0
    records = tuple(sorted((_record(spec, row, origin) for row in rows), key=lambda r: r.index))
    return RawRun(records, exhausted[0] - origin if exhausted else None, wall, cpu, origin, tuple(lags))


def _record(spec: WorkloadSpec, row: tuple[Any, ...], origin: float) -> RequestRecord:
    index, intended, sent, end, token_times, usage_tokens, status, error = row
    tokens_from = "usage" if usage_tokens is not None else "chunks"
    output_tokens = usage_tokens if usage_tokens is not None else len(token_times)
    failure = None
    if error is not None:
        failure = RequestError(index, status, error[0], error[1], error[2])
    elif not token_times:
        failure = RequestError(index, status, "no_tokens", "stream finished with no content chunk")
    elif output_tokens != spec.output_tokens:
        failure = RequestError(
            index,
            status,
            "token_count",
            f"expected exactly {spec.output_tokens} output tokens (max_tokens + ignore_eos), got "
            f"{output_tokens} (from {tokens_from})",
        )
    return RequestRecord(
        index=index,
        warmup=index < spec.warmup_requests,
        intended_s=intended - origin,
        sent_s=sent - origin,
        end_s=end - origin,
        token_times_s=tuple(t - origin for t in token_times),
        output_tokens=output_tokens,
        tokens_from=tokens_from,
        error=failure,
    )

"""The load process's measuring core: clock origin, event-loop lag probe, CPU time, and the per-request
records built after the clock. The requests themselves go through one of two HTTP clients, chosen by
``WorkloadSpec.http_client``:

- ``"fast"`` (default, ``fast_client``): lean HTTP/1.1 keep-alive over asyncio Protocols + httptools,
  request heads pre-serialised before the clock, no coroutine per request. Plain ``http://`` only.
- ``"aiohttp"`` (``aiohttp_client``): slower per request but a full HTTP client (TLS, redirects,
  close-delimited bodies); use it for servers the lean client cannot talk to.

Both feed raw rows ``(index, intended, sent, end, token_times, usage_tokens, status, error)`` into the
same list, with the same error kinds, so records and reports do not depend on the HTTP client.

Closed-loop scheduling delay is this client's own turnaround (a slot freed -> the next request handed
to the transport). It cannot see time a finished response waited in the socket while the loop was
busy; the event-loop lag probe measures that (also when the process is starved of CPU by others), and
the stub's arrival/completion times show it from the server's side.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine_fixtures.loadgen.records import RequestError, RequestRecord
from engine_fixtures.loadgen.workload import WorkloadSpec

LAG_PROBE_S = 0.05


@dataclass(frozen=True)
class RawRun:
    """What the load process measured. ``exhausted_s``: when a closed-loop worker first found no
    request left (end of the full-concurrency window); ``cpu_s``/``wall_s``: the client process's CPU
    time and wall time over the whole run; ``loop_lag_s``: lateness of a timer probe every
    ``LAG_PROBE_S`` (event-loop lag: busy loop or starved process); ``origin``: the
    ``time.perf_counter()`` value record times are relative to (CLOCK_MONOTONIC on Linux, so
    comparable with other processes' clocks). ``measure_at``/``stop_at``: a load stream's segment only
    (``stream_driver.StreamDriver``, the one place that decides them), absolute ``perf_counter`` values:
    when its warm-up ended and when sending stopped; None for a run of a fixed list of requests."""

    records: tuple[RequestRecord, ...]
    exhausted_s: float | None
    wall_s: float
    cpu_s: float
    origin: float = 0.0
    loop_lag_s: tuple[float, ...] = ()
    measure_at: float | None = None
    stop_at: float | None = None


class _Counter:
    """Stand-in for the shared progress counter when none is given."""

    value = 0


async def run_client(url: str, spec: WorkloadSpec, bodies: Sequence[bytes], counter: Any = None,
                     driver: Any = None, origin: float | None = None) -> RawRun:
    """Send every body (warmup first) through ``spec.http_client`` and return the raw measurement; ``driver``
    replaces the HTTP client's own (the load stream's time-bounded loop). ``origin``: the clock origin record times
    count from, now by default (the load stream passes the one its driver's warm-up counts from). Never raises for a
    request error: failures are recorded per request."""
    counter = counter if counter is not None else _Counter()
    if driver is None:
        if spec.http_client == "fast":
            from engine_fixtures.loadgen.fast_client import FastDriver as Driver
        else:
            from engine_fixtures.loadgen.aiohttp_client import AiohttpDriver as Driver  # type: ignore[assignment]
        driver = Driver(url, spec, bodies)  # pre-serialises what it can, before the clock
    rows: list[tuple[Any, ...]] = []
    origin = time.perf_counter() if origin is None else origin
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
    try:
        await driver.run(rows, counter, exhausted)
    finally:
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

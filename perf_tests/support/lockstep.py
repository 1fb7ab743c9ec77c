"""Synthetic closed-loop request records for the window estimators' self-tests (no client, no engine).

``closed_loop(concurrency, period_s, seconds)``: each of ``concurrency`` slots sends its next request the moment
the previous one ends, and every request lasts about ``period_s``. In lockstep (the default) all slots' requests end
together, in bursts of ``concurrency`` once per period, as the H200 runs at a fixed output length do (88 of 95
bursts of 16 within ~4 ms: ``jitter_s``); ``stagger=True`` shifts slot ``i`` by ``i / concurrency`` of a period so
completions are spread evenly. The true rate is ``concurrency / period_s`` either way. ``segment_of`` wraps records
in a ``loadgen.stream.Segment`` whose windows start where the test says.
"""

from __future__ import annotations

import numpy as np

from engine_fixtures.loadgen.records import RequestRecord
from engine_fixtures.loadgen.stream import Segment
from engine_fixtures.loadgen.workload import WorkloadSpec


def closed_loop(concurrency: int, period_s: float, seconds: float, *, stagger: bool = False, jitter_s: float = 0.0,
                tokens: int = 8, ttft_s: float = 0.05, seed: int = 0) -> tuple[RequestRecord, ...]:
    """Records (times from the segment's first send) of every request that ends by ``seconds``: ``tokens``
    content chunks each, the first ``ttft_s`` after the send, the rest evenly spaced up to the end."""
    rng = np.random.default_rng(seed)
    out: list[RequestRecord] = []
    for slot in range(concurrency):
        offset = slot * period_s / concurrency if stagger else 0.0
        sent, k = 0.0, 1
        while (end := k * period_s + offset + float(rng.uniform(0.0, jitter_s))) <= seconds:
            first = sent + ttft_s
            times = tuple(np.linspace(first, end, tokens)) if tokens > 1 else (first,)
            out.append(RequestRecord(len(out), False, sent, sent, end, times, tokens, "usage"))
            sent, k = end, k + 1
    return tuple(sorted(out, key=lambda r: r.sent_s))


def segment_of(records: tuple[RequestRecord, ...], concurrency: int, warmup_s: float, measure_s: float,
               start: float = 1000.0) -> Segment:
    """A segment of ``records``, its first send at ``start`` (CLOCK_MONOTONIC s), measured from ``start + warmup_s``
    for ``measure_s``. The warm-up's end is given, not derived: a real stream extends it until the requests sent in it
    have completed (``loadgen.stream_driver``); the estimators' tests place their windows where they choose."""
    spec = WorkloadSpec(num_requests=len(records), concurrency=concurrency)
    end = start + max(r.end_s for r in records)
    return Segment("http://127.0.0.1:1", spec, start, start + warmup_s, start + warmup_s + measure_s, end, records,
                   (), 0.0)

"""Metric computations over request records (pure functions, unit-tested on synthetic records)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from engine_fixtures.errors import MeasurementError
from engine_fixtures.loadgen.records import RequestRecord


@dataclass(frozen=True)
class Percentiles:
    """p50/p90/p99 (linear interpolation, numpy's default), mean and geometric mean, in milliseconds.

    ``gmean`` is ``exp(mean(log(v)))`` over the values, nan when any value is not positive (a log has no such
    value). It is the per-window estimator the judge gates TPOT on: TPOT comes in two modes per lockstep wave (4.2-4.4
    or 5.8-6.2 ms at C=16 on the H200), so the median of a 3 s window jumps between them with the share of slow waves,
    while the geometric mean moves with it smoothly: recomputed on the committed 2026-12-02 H200 windows it cut the
    per-block sd of every contrast's TPOT 3-5x (14.5 -> 3.0 %, 12.9 -> 3.6 %; docs/results/estimators-2026-12-03)."""

    p50: float
    p90: float
    p99: float
    mean: float
    count: int
    gmean: float = float("nan")

    @classmethod
    def of_seconds(cls, values: Iterable[float], what: str) -> Percentiles:
        """Raises ``MeasurementError`` on an empty set: no data is never a 0 ms latency."""
        arr = np.fromiter(values, dtype=float) * 1000.0
        if arr.size == 0:
            raise MeasurementError(f"no {what} values to summarise: no completed request produced one")
        p50, p90, p99 = np.percentile(arr, [50, 90, 99])
        gmean = float(np.exp(np.log(arr).mean())) if (arr > 0).all() else float("nan")
        return cls(float(p50), float(p90), float(p99), float(arr.mean()), int(arr.size), gmean)


def time_weighted_in_flight(records: Sequence[RequestRecord], start: float, end: float) -> float:
    """Mean number of requests in flight over ``[start, end]``: each request counts for the part of
    ``[sent_s, end_s]`` that overlaps the window."""
    if not end > start:
        raise MeasurementError(f"empty measurement window [{start:.6f}, {end:.6f}] s: too few requests")
    busy = sum(max(0.0, min(r.end_s, end) - max(r.sent_s, start)) for r in records)
    return busy / (end - start)


def rate_of(times: Sequence[float]) -> float:
    """Events per second from sorted event times: ``(n - 1) / (last - first)``."""
    if len(times) < 2 or not times[-1] > times[0]:
        raise MeasurementError(f"cannot compute a rate from {len(times)} event(s): need >= 2 distinct times")
    return (len(times) - 1) / (times[-1] - times[0])


def closed_loop_window(records: Sequence[RequestRecord], exhausted_s: float | None) -> tuple[float, float]:
    """Full-concurrency window: from the first measured send to the moment a worker first found no
    request left (falls back to the last measured send)."""
    measured = [r for r in records if not r.warmup]
    start = min(r.sent_s for r in measured)
    end = exhausted_s if exhausted_s is not None else max(r.sent_s for r in measured)
    return start, end


def tpot_values(records: Iterable[RequestRecord]) -> list[float]:
    return [t for t in (r.tpot_s for r in records) if t is not None]


def itl_values(records: Iterable[RequestRecord]) -> list[float]:
    return [gap for r in records for gap in r.itl_s]

"""Timestamped readings that a sampler keeps while it runs, so one sampler over a whole load segment can be cut
into measurement windows afterwards (``cut(t0, t1)`` on the CPU and GPU samplers).

- ``Counter``: cumulative values (CPU seconds per role); ``delta(key, t0, t1)`` interpolates linearly between
  the readings around each mark, so a window's share does not depend on where the ticks fell. A key that
  appears later was 0 before its first reading (a process born later had used no CPU).
- ``Gauge``: instantaneous values (GPU utilisation); ``between(t0, t1)`` returns the readings
  taken inside the window, and raises ``MeasurementError`` when there is none (a window shorter than the tick).
Times are ``time.monotonic()`` seconds.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping

import numpy as np

from engine_fixtures.errors import MeasurementError


class Counter:
    def __init__(self) -> None:
        self.times: list[float] = []
        self.values: dict[str, list[float]] = {}

    def add(self, t: float, values: Mapping[str, float]) -> None:
        if self.times and t < self.times[-1]:
            raise MeasurementError(f"counter reading at {t} is older than the last one ({self.times[-1]})")
        n = len(self.times)
        for key, value in values.items():
            column = self.values.setdefault(key, [0.0] * n)
            column.append(value)
        for column in self.values.values():
            if len(column) == n:  # not read this time: unchanged (a process that ended keeps its last value)
                column.append(column[-1] if column else 0.0)
        self.times.append(t)

    def keys(self) -> tuple[str, ...]:
        return tuple(self.values)

    def delta(self, key: str, t0: float, t1: float) -> float:
        """The counter's increase over ``[t0, t1]``; ``MeasurementError`` if the readings do not cover it."""
        if len(self.times) < 2 or t0 < self.times[0] or t1 > self.times[-1]:
            span = f"[{self.times[0]:.3f}, {self.times[-1]:.3f}]" if self.times else "no readings"
            raise MeasurementError(f"window [{t0:.3f}, {t1:.3f}] is outside the sampler's readings {span}; "
                                   "the sampler must run over the whole load segment")
        column = self.values[key]
        return float(np.interp(t1, self.times, column) - np.interp(t0, self.times, column))


class Gauge:
    def __init__(self) -> None:
        self.times: list[float] = []
        self.values: list[float] = []

    def add(self, t: float, value: float) -> None:
        self.times.append(t)
        self.values.append(value)

    def between(self, t0: float, t1: float, what: str) -> np.ndarray:
        lo = bisect.bisect_left(self.times, t0)
        hi = bisect.bisect_left(self.times, t1)
        if hi <= lo:
            raise MeasurementError(f"no {what} reading inside the window [{t0:.3f}, {t1:.3f}]: the window is "
                                   "shorter than the sampling interval; lengthen --perf-window-s")
        return np.asarray(self.values[lo:hi], dtype=float)

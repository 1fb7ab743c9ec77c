"""Change points in a metric's history: binary segmentation with a permutation test.

Statistic of a segment x[0:n]: max over split k of ``sqrt(k (n-k) / n) * |mean(x[:k]) - mean(x[k:])|``
(the CUSUM mean-shift statistic). Its p-value is the fraction of ``permutations`` seeded shuffles
of the segment whose statistic is >= the observed one (``(1 + hits) / (1 + permutations)``). A
split with ``p <= alpha`` is kept and both halves are searched again (segments shorter than
``2 * min_size`` are not split). A slow drift that never crosses a per-run threshold still shows
up as a significant mean shift between the early and late runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ChangePoint:
    index: int  # first run of the new regime
    p_value: float
    before_mean: float
    after_mean: float

    @property
    def relative_change(self) -> float:
        return (self.after_mean - self.before_mean) / abs(self.before_mean) if self.before_mean else float("inf")


def _stat(x: np.ndarray, min_size: int) -> tuple[float, int]:
    n = len(x)
    k = np.arange(min_size, n - min_size + 1)
    csum = np.cumsum(x)
    left = csum[k - 1] / k
    right = (csum[-1] - csum[k - 1]) / (n - k)
    t = np.sqrt(k * (n - k) / n) * np.abs(left - right)
    i = int(np.argmax(t))
    return float(t[i]), int(k[i])


def detect(series: Sequence[float], alpha: float = 0.01, permutations: int = 999, min_size: int = 2,
           seed: int = 0) -> list[ChangePoint]:
    """Change points of ``series`` (ordered oldest first), sorted by index."""
    x = np.asarray(series, dtype=float)
    rng = np.random.default_rng(seed)
    found: list[ChangePoint] = []
    stack = [(0, len(x))]
    while stack:
        lo, hi = stack.pop()
        seg = x[lo:hi]
        if len(seg) < 2 * min_size or np.ptp(seg) == 0:
            continue
        observed, k = _stat(seg, min_size)
        hits = sum(_stat(rng.permutation(seg), min_size)[0] >= observed for _ in range(permutations))
        p = (1 + hits) / (1 + permutations)
        if p <= alpha:
            found.append(ChangePoint(lo + k, p, float(seg[:k].mean()), float(seg[k:].mean())))
            stack += [(lo, lo + k), (lo + k, hi)]
    return sorted(found, key=lambda c: c.index)

"""A measured level with its interval, and the ratio of two levels against a factor (the seed figures' rows).

``level(name, block means, ...)``: the mean of per-block means, its standard error and t interval over the blocks
(the block is the unit). ``gap(a, b)``: the difference of two levels measured apart (Welch degrees of freedom).
``ratio_row(label, a, b, factor, side)``: ``a / b`` with a delta-method interval on the log scale; its ``status`` is
``reproduced`` when the whole interval lies on ``side`` of ``factor``, ``not reproduced`` when wholly on the other
side, ``undecided`` otherwise. ``FigureResult`` is what the report draws (plain values, no declarations).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats

from engine_fixtures.errors import MeasurementError
from engine_fixtures.judge.rows import Verdict

CONFIDENCE = 0.95
SIDES = (">=", "<=")
FEW_REQUESTS = 10.0  # completed requests per window below which a row says its statistic rests on few requests
COUNT = "requests_completed"  # the per-window count of completed requests (scenarios.segment)
Window = tuple[int, dict[str, float]]  # (block index, the window's values)


@dataclass(frozen=True)
class Level:
    """One measured point: the mean, its standard error and degrees of freedom, the blocks behind it."""

    series: str
    x: float
    value: float
    se: float
    df: float
    blocks: int
    seed: float | None
    engines: int
    requests: float | None = None  # completed requests per window behind the level (None: not counted)

    @property
    def interval(self) -> tuple[float, float]:
        if not (math.isfinite(self.se) and self.df > 0):
            return (math.nan, math.nan)
        half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, self.df)) * self.se
        return (self.value - half, self.value + half)


@dataclass(frozen=True)
class ShapeRow:
    label: str
    ratio: float
    lo: float
    hi: float
    factor: float
    side: str
    engines: int

    @property
    def status(self) -> str:
        seed_side = (lambda v: v >= self.factor) if self.side == ">=" else (lambda v: v <= self.factor)
        if not (math.isfinite(self.lo) and math.isfinite(self.hi)):
            return "undecided"
        if seed_side(self.lo) and seed_side(self.hi):
            return "reproduced"
        if not seed_side(self.lo) and not seed_side(self.hi):
            return "not reproduced"
        return "undecided"


@dataclass(frozen=True)
class FigureResult:
    """One seed figure measured: what the report draws and the table lists."""

    id: str
    title: str
    metric: str
    unit: str
    draw: str  # "lines" or "bars"
    x_label: str
    source: str
    levels: tuple[Level, ...]
    shapes: tuple[ShapeRow, ...]


def block_means(windows: Sequence[Window], name: str) -> list[float]:
    by: dict[int, list[float]] = {}
    for b, w in windows:
        if name in w and math.isfinite(w[name]):
            by.setdefault(b, []).append(w[name])
    return [float(np.mean(v)) for _, v in sorted(by.items())]


def requests_per_window(windows: Sequence[Window]) -> float | None:
    """The mean count of completed requests per window (``COUNT``), None where the windows do not count them."""
    counts = [w[COUNT] for _, w in windows if COUNT in w]
    return float(np.mean(counts)) if counts else None


def level(series: str, x: float, means: Sequence[float], what: str, seed: float | None = None,
          requests: float | None = None) -> Level:
    if not means:
        raise MeasurementError(f"{what}: no measured window; a figure point with no data is an error")
    n = len(means)
    se = float(np.std(means, ddof=1) / math.sqrt(n)) if n > 1 else math.nan
    return Level(series, x, float(np.mean(means)), se, n - 1.0, n, seed, 1, requests)


def gap(a: Level, b: Level) -> Level:
    """``a - b`` for two levels measured on separate engines."""
    return replace(a, value=a.value - b.value, se=math.hypot(a.se, b.se),
                   df=_welch_df(a.se, a.blocks, b.se, b.blocks), engines=2)


def _welch_df(se1: float, n1: int, se2: float, n2: int) -> float:
    if not (math.isfinite(se1) and math.isfinite(se2)) or n1 < 2 or n2 < 2 or se1 + se2 == 0:
        return 0.0
    return (se1**2 + se2**2) ** 2 / (se1**4 / (n1 - 1) + se2**4 / (n2 - 1))


def ratio_row(label: str, a: Level, b: Level, factor: float, side: str, engines: int) -> ShapeRow:
    """The ratio of two levels with a delta-method interval on the log scale (both must be positive)."""
    if a.value <= 0 or b.value <= 0:
        return ShapeRow(label, math.nan, math.nan, math.nan, factor, side, engines)
    ra, rb = a.se / a.value, b.se / b.value
    se = math.hypot(ra, rb)
    df = _welch_df(ra, a.blocks, rb, b.blocks)
    ratio = a.value / b.value
    if not (math.isfinite(se) and df > 0):
        return ShapeRow(label, ratio, math.nan, math.nan, factor, side, engines)
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, df)) * se
    return ShapeRow(label, ratio, ratio * math.exp(-half), ratio * math.exp(half), factor, side, engines)


def figure_rows(fig: FigureResult) -> list[Verdict]:
    """The figure as report-only rows: each point beside the seed's number, then each shape with its status."""
    out = []
    for lv in fig.levels:
        lo, hi = lv.interval
        ci = f" (95% CI {lo:.4g} to {hi:.4g})" if math.isfinite(lo) else " (no interval)"
        seed = "" if lv.seed is None else f"; seed {lv.seed:.4g} ({lv.value / lv.seed - 1:+.0%})" if lv.seed else ""
        apart = "; two engines, so their instance offset is not inside the interval" if lv.engines > 1 else ""
        if lv.requests is not None and lv.requests < FEW_REQUESTS:
            apart += (f"; rests on {lv.requests:.1f} completed requests per window, too few for a steady "
                      "percentile: lengthen the window (--perf-window-s)")
        out.append(Verdict(fig.metric, "report-only", "level", lv.seed, lv.value,
                           None if not lv.seed else lv.value / lv.seed - 1, None, None, lv.blocks,
                           f"{lv.series} at {fig.x_label} {lv.x:g}: {lv.value:.4g} {fig.unit}{ci} over {lv.blocks} "
                           f"blocks{seed}{apart} [measured row: the seed's figure {fig.id}]", gating=False))
    for s in fig.shapes:
        ci = f" (95% CI {s.lo:.3g}x to {s.hi:.3g}x)" if math.isfinite(s.lo) else " (no interval)"
        apart = "; across two engines: their instance offset is not inside the interval" if s.engines > 1 else ""
        out.append(Verdict(f"shape: {s.label}", "report-only", "diagnostic", s.factor, s.ratio, None, None, None, 0,
                           f"{s.label}: ratio {s.ratio:.3g}x{ci}, the seed's side {s.side} {s.factor:g}x: "
                           f"{s.status}{apart} [measured row: the seed's figure {fig.id}]", gating=False))
    return out

"""A verdict row and how it reads: levels, changes in the metric's bad direction, messages.

``delta`` is the change of the current level against the baseline's (relative for log-scale metrics, absolute
for linear ones, signed in the raw direction). ``detectable`` is the change in the bad direction that the gate
promises to catch with probability >= 1 - beta (``catches``); for a contrast with a bound, the change beyond the
bound (the margin the bound allows is not counted twice). ``worse``/``worse_lo``/``worse_hi`` are the measured
change in the bad direction and its interval at the gate's own alpha, ``flags`` the change beyond which it is
flagged and ``excludes`` the change a pass excludes, all against the baseline or reference: what the report's
forest plot draws.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from engine_fixtures.judge.decide import Decision, q
from engine_fixtures.judge.metrics import Metric, metric

Status = Literal["pass", "regression", "improvement", "inconclusive", "no-baseline", "report-only"]
# group: separate engines, units named in words; level: a measured row of a seed figure (its n counts blocks)
Kind = Literal["history", "paired", "group", "bound", "diagnostic", "level"]
VERDICTS: tuple[str, ...] = ("pass", "regression", "improvement", "inconclusive")
STATUSES: tuple[str, ...] = ("regression", "inconclusive", "improvement", "no-baseline", "pass", "report-only")


@dataclass(frozen=True)
class Verdict:
    metric: str
    status: Status
    kind: Kind
    baseline: float | None
    current: float | None
    delta: float | None
    detectable: float | None
    runs: int | None
    windows: int
    message: str
    scale: str = "log"
    worse: float | None = None
    worse_lo: float | None = None
    worse_hi: float | None = None
    flags: float | None = None
    gating: bool = True
    excludes: float | None = None

    @property
    def is_verdict(self) -> bool:
        return self.status in VERDICTS

    def change_text(self, value: float | None) -> str:
        if value is None or not math.isfinite(value):
            return "-"
        return f"{value:+.1%}" if self.scale == "log" else f"{value:+.3g}"


def level(m: Metric, values: Sequence[float]) -> float:
    """The natural-unit level of ``values``: geometric mean on the log scale, mean on the linear one."""
    x = m.scale.forward(values)
    return float(math.exp(x.mean())) if m.scale.name == "log" else float(x.mean())


def worse_change(m: Metric, size: float) -> float:
    """A size on the judged scale as the change in the metric's bad direction (relative for log)."""
    if m.scale.name == "linear":
        return size
    return math.expm1(size) if m.direction == "lower" else -math.expm1(-size)


def delta_of(m: Metric, base: float, cur: float) -> float:
    if m.scale.name == "linear":
        return cur - base
    return cur / base - 1.0 if base else math.inf


def with_interval(v: Verdict, m: Metric, d: Decision, alpha: float) -> Verdict:
    """``v`` with the effect, its two-sided interval at ``alpha`` per side, the flag threshold and the size a pass
    excludes (``d.detectable``), all as changes in the bad direction against the baseline or reference (what the
    forest plot draws)."""
    if not math.isfinite(d.effect):
        return v
    half = q(1 - alpha, d.df) * d.se if math.isfinite(d.se) and math.isfinite(d.df) else math.nan
    lo, hi = (d.effect - half, d.effect + half) if math.isfinite(half) else (None, None)
    return replace(v, worse=worse_change(m, d.effect),
                   worse_lo=None if lo is None else worse_change(m, lo),
                   worse_hi=None if hi is None else worse_change(m, hi),
                   flags=worse_change(m, d.threshold) if math.isfinite(d.threshold) else None,
                   excludes=worse_change(m, d.detectable) if d.detectable is not None else None)


def message(m: Metric, d: Decision, base: float, cur: float, delta: float, runs: int | None) -> str:
    unit = m.unit
    change = f"{delta:+.1%}" if m.scale.name == "log" else f"{delta:+.3g} {unit}"
    head = f"{m.name}: {base:.4g} -> {cur:.4g} {unit} ({change})"
    if d.status == "inconclusive":
        return f"{head}: inconclusive: {d.reason}"
    promise = (f"; catches {worse_change(m, d.detectable):.1%}" if m.scale.name == "log" and d.detectable
               else f"; catches {d.detectable:.3g} {unit}" if d.detectable else "")
    pooled = f" over {runs} pooled runs" if runs else ""
    flag = f"flags beyond {worse_change(m, d.threshold):.1%}" if m.scale.name == "log" else \
        f"flags beyond {d.threshold:.3g} {unit}"
    return f"{head}: {d.status} ({flag}{promise}{pooled})"


def diagnostic(m: Metric | str, current: Sequence[float], baseline_runs: Sequence[Sequence[float]] = (),
               why: str = "a diagnostic") -> Verdict:
    """A report-only row: the value next to its baseline, never a verdict."""
    m = m if isinstance(m, Metric) else metric(m)
    cur = float(np.median(current))
    flat = [v for r in baseline_runs for v in r]
    base = float(np.median(flat)) if flat else None
    delta = None if base is None else (cur - base if m.scale.name == "linear" or not base else cur / base - 1)
    return Verdict(m.name, "report-only", "diagnostic", base, cur, delta, None, len(baseline_runs) or None,
                   len(current), f"{m.name}: {cur:.4g} {m.unit}, reported, not judged ({why})", "linear",
                   gating=False)


def as_diagnostic(v: Verdict, why: str) -> Verdict:
    """A judged row of a metric that does not gate this scenario: kept as report-only, its judgement in words."""
    return replace(v, status="report-only", kind="diagnostic", gating=False,
                   message=f"{v.message} [report-only: {why}]")

"""Measure the gate's own quality on synthetic data of known noise (``perf-baseline gate-quality``).

Each trial draws ``n`` baseline and ``n`` current repeats from a lognormal distribution with the
given coefficient of variation, multiplies the current ones by ``1 + shift`` (the bad direction of
a lower-is-better metric) and calls the real ``gate.judge``. A cell reports the fraction of trials
judged ``regression`` (false-alarm rate when ``shift == 0``, detection rate otherwise) and the
fraction judged ``unstable``. Seeded: the same arguments give the same table.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from engine_fixtures.judge.gate import judge
from engine_fixtures.judge.metrics import Metric

_PROBE = Metric("gate_quality_probe_ms", "ms", "lower", 0.10, True, "synthetic lower-is-better metric")


@dataclass(frozen=True)
class Cell:
    cv: float
    n: int
    tolerance: float
    shift: float
    trials: int
    regression_rate: float
    unstable_rate: float


def simulate(cv: float, n: int, tolerance: float, shift: float, trials: int, seed: int = 0) -> Cell:
    """Run ``trials`` judgements of ``n`` vs ``n`` lognormal repeats with CV ``cv`` and ``shift``."""
    sigma = math.sqrt(math.log1p(cv * cv))
    rng = np.random.default_rng([seed, n, round(cv * 1e4), round(shift * 1e4), round(tolerance * 1e4)])
    base = rng.lognormal(0.0, sigma, size=(trials, n)) * 100.0
    cur = rng.lognormal(0.0, sigma, size=(trials, n)) * 100.0 * (1.0 + shift)
    regressions = unstable = 0
    for b, c in zip(base, cur, strict=True):
        status = judge(_PROBE, b.tolist(), c.tolist(), tolerance=tolerance).status
        regressions += status == "regression"
        unstable += status == "unstable"
    return Cell(cv, n, tolerance, shift, trials, regressions / trials, unstable / trials)


def table(cvs: Sequence[float] = (0.03, 0.05), repeats: Sequence[int] = (3, 5, 10),
          tolerances: Sequence[float] = (0.05, 0.10), shifts: Sequence[float] = (0.0, 0.05, 0.10, 0.20),
          trials: int = 2000, seed: int = 0) -> list[Cell]:
    return [simulate(cv, n, tol, shift, trials, seed)
            for cv in cvs for n in repeats for tol in tolerances for shift in shifts]


def render(cells: Sequence[Cell]) -> str:
    """Plain-text table: one row per (cv, n, tolerance), one column per shift."""
    shifts = sorted({c.shift for c in cells})
    rows: dict[tuple[float, int, float], dict[float, Cell]] = {}
    for c in cells:
        rows.setdefault((c.cv, c.n, c.tolerance), {})[c.shift] = c
    cols = [("false alarm" if s == 0 else f"detect +{s:.0%}") for s in shifts]
    heads = ["CV", "n", "tol", *cols, "unstable"]
    lines = [" | ".join(heads)]
    for (cv, n, tol), by_shift in rows.items():
        cols = [f"{cv:.0%}", str(n), f"{tol:.0%}"] + [f"{by_shift[s].regression_rate:.1%}" for s in shifts]
        cols.append(f"{max(c.unstable_rate for c in by_shift.values()):.1%}")
        lines.append(" | ".join(cols))
    trials = cells[0].trials if cells else 0
    lines.append(f"({trials} seeded trials per cell; lognormal noise; regression = beyond tolerance AND "
                 "one-sided Mann-Whitney p <= 0.05; unstable = max over shifts)")
    return "\n".join(lines)

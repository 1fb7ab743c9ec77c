"""Three-valued decisions: ``pass``, ``regression``/``improvement``, or ``inconclusive`` when the data cannot say.

All effects are on the judged scale (log or linear, see ``noise.Scale``) and signed so that positive is
worse. ``alpha`` is the one-sided false-alarm rate per cell and per side; ``beta`` the miss rate at the
promised size. Quantiles are Student t at the effect's degrees of freedom.

History (one run against a pooled baseline, ``judge_history``)::

    T_run = max(floor, t(1-alpha) * se_run)                            flagged beyond this
    D     = max(floor, t(1-alpha) * se_ref) + t(1-beta) * se_ref      the promise: caught with >= 1-beta
    regression   if effect >  T_run
    improvement  if effect < -T_run
    pass         if |effect| + t(1-beta) * se_run <= D                 a change of size D is excluded
    inconclusive otherwise

``se_ref`` is the prediction error of a run measured like the baseline's runs, ``se_run`` that of this run.
When this run is no noisier than the baseline's (se_run <= se_ref) every outcome is decided: |effect| <= T_run
implies the pass condition. Inconclusive is what a run noisier than its baseline gets until more windows
bring se_run down, and what it keeps at the budget: then it is not a pass.

Paired (A/B blocks or same-run arm pairs, ``judge_paired``): the same rule on the mean of per-block log
ratios, with ``se = sd/sqrt(P)``; the promise uses the budget's ``P_max`` blocks, so a clean comparison
passes once the interval is narrow enough, and a real change is flagged as soon as it is significant.

Bound (a same-run invariant "ratio >= bound", ``judge_bound``): regression when the one-sided interval
of the ratio lies below the bound, pass when it lies above, inconclusive while it straddles it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import stats

from engine_fixtures.judge.noise import NoiseModel, run_within_sd

Status = Literal["pass", "regression", "improvement", "inconclusive"]
ALPHA = 0.01
BETA = 0.10
MIN_BLOCKS = 3


def q(p: float, df: float) -> float:
    """Upper ``p`` quantile of Student t with ``df`` degrees of freedom (normal for df = inf)."""
    if math.isinf(df) or df > 1e6:
        return float(stats.norm.ppf(p))
    return float(stats.t.ppf(p, max(df, 1.0)))


@dataclass(frozen=True)
class Decision:
    """A decision and the numbers behind it (judged scale; ``effect`` > 0 is worse)."""

    status: Status
    effect: float
    se: float
    df: float
    threshold: float  # beyond +-threshold the effect is flagged
    detectable: float | None  # the promised size, caught with probability >= 1 - beta (None for bounds)
    reason: str = ""

    @property
    def decided(self) -> bool:
        return self.status != "inconclusive"


def _classify(effect: float, se: float, df: float, threshold: float, detectable: float, beta: float,
              why_not: str) -> Decision:
    if effect > threshold:
        return Decision("regression", effect, se, df, threshold, detectable)
    if effect < -threshold:
        return Decision("improvement", effect, se, df, threshold, detectable)
    if abs(effect) + q(1 - beta, df) * se <= detectable:
        return Decision("pass", effect, se, df, threshold, detectable)
    return Decision("inconclusive", effect, se, df, threshold, detectable, why_not)


def judge_history(model: NoiseModel, current: Sequence[float], sign: float, floor: float,
                  alpha: float = ALPHA, beta: float = BETA) -> Decision:
    """This run's windows ``current`` (judged scale) against the pooled ``model``; ``sign`` is +1 when larger is
    worse, -1 when larger is better; ``floor`` is the declared smallest change worth flagging (judged scale)."""
    cur = np.asarray(current, dtype=float)
    if cur.size == 0:
        raise ValueError("no windows in this run to judge")
    reason = model.unusable()
    effect = sign * (float(cur.mean()) - model.level)
    if reason is not None:
        return Decision("inconclusive", effect, math.nan, math.nan, math.nan, None, reason)
    se_run, df_run = model.prediction(cur.size, run_within_sd(model, cur))
    se_ref, df_ref = model.prediction(model.typical_windows)
    threshold = max(floor, q(1 - alpha, df_run) * se_run)
    detectable = max(floor, q(1 - alpha, df_ref) * se_ref) + q(1 - beta, df_ref) * se_ref
    why = (f"this run ({cur.size} windows) is noisier than its baseline's runs: prediction error {se_run:.3g} vs "
           f"{se_ref:.3g}; more windows or a quieter machine")
    return _classify(effect, se_run, df_run, threshold, detectable, beta, why)


def judge_paired(log_ratios: Sequence[float], sign: float, floor: float, budget: int,
                 alpha: float = ALPHA, beta: float = BETA) -> Decision:
    """Per-block ``log(candidate / reference)`` values (judged scale differences) of a paired design."""
    r = sign * np.asarray(log_ratios, dtype=float)
    p = r.size
    if p < MIN_BLOCKS:
        effect = float(r.mean()) if p else math.nan
        return Decision("inconclusive", effect, math.nan, math.nan, math.nan, None,
                        f"{p} paired block(s); a paired interval needs >= {MIN_BLOCKS}")
    sd = float(r.std(ddof=1))
    effect = float(r.mean())
    df = p - 1
    se = sd / math.sqrt(p)
    cap = max(budget, p)
    se_budget = sd / math.sqrt(cap)
    threshold = max(floor, q(1 - alpha, df) * se)
    detectable = max(floor, q(1 - alpha, cap - 1) * se_budget) + q(1 - beta, cap - 1) * se_budget
    why = f"the interval of {p} blocks (se {se:.3g}) still spans the promised size; more blocks"
    return _classify(effect, se, df, threshold, detectable, beta, why)


def judge_bound(log_ratios: Sequence[float], bound: float, alpha: float = ALPHA) -> Decision:
    """Invariant ``exp(mean log ratio) >= bound`` from per-block log ratios (larger is better).

    ``effect`` = log(bound) - mean log ratio (> 0: the invariant is violated by that much)."""
    r = np.asarray(log_ratios, dtype=float)
    if not bound > 0:
        raise ValueError(f"bound must be > 0, got {bound}")
    target = math.log(bound)
    p = r.size
    if p < MIN_BLOCKS:
        effect = target - float(r.mean()) if p else math.nan
        return Decision("inconclusive", effect, math.nan, math.nan, 0.0, None,
                        f"{p} paired round(s); the invariant needs >= {MIN_BLOCKS}")
    effect = target - float(r.mean())
    se = float(r.std(ddof=1)) / math.sqrt(p)
    return _bound_decision(effect, se, p - 1, bound, alpha, "more rounds")


def judge_bound_unpaired(reference_logs: Sequence[float], current_logs: Sequence[float], bound: float,
                         alpha: float = ALPHA) -> Decision:
    """Invariant ``exp(mean current - mean reference) >= bound`` for two separately measured arms (separate
    engines, one after the other): a Welch interval, which knows only the spread inside each run."""
    ref, cur = np.asarray(reference_logs, dtype=float), np.asarray(current_logs, dtype=float)
    if ref.size < MIN_BLOCKS or cur.size < MIN_BLOCKS:
        return Decision("inconclusive", math.nan, math.nan, math.nan, 0.0, None,
                        f"{min(ref.size, cur.size)} window(s) on one side; the invariant needs >= {MIN_BLOCKS}")
    va, vb = ref.var(ddof=1) / ref.size, cur.var(ddof=1) / cur.size
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / ((va**2) / (ref.size - 1) + (vb**2) / (cur.size - 1)) if se > 0 else math.inf
    effect = math.log(bound) - float(cur.mean() - ref.mean())
    return _bound_decision(effect, se, df, bound, alpha, "more windows")


def _bound_decision(effect: float, se: float, df: float, bound: float, alpha: float, more: str) -> Decision:
    half = q(1 - alpha, df) * se
    if effect > half:
        return Decision("regression", effect, se, df, half, None)
    if effect < -half:
        return Decision("pass", effect, se, df, half, None)
    return Decision("inconclusive", effect, se, df, half, None,
                    f"the one-sided {1 - alpha:.1%} interval of the ratio ({math.exp(-effect - half) * bound:.3f}-"
                    f"{math.exp(-effect + half) * bound:.3f}x) straddles the bound {bound:g}x; {more}")

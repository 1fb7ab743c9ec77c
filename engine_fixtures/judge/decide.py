"""Three-valued decisions: ``pass``, ``regression``/``improvement``, or ``inconclusive`` when the data cannot say.

All effects are on the judged scale (log or linear, see ``noise.Scale``) and signed so that positive is
worse. ``alpha`` is the one-sided false-alarm rate per cell and per side; ``beta`` the miss rate at the
promised size. Quantiles are Student t at the effect's degrees of freedom.

History (one run against a pooled baseline, ``decide_history``)::

    T_run = max(floor, t(1-alpha) * se_run)                            flagged beyond this
    D     = max(floor, t(1-alpha) * se_ref) + t(1-beta) * se_ref      the promise: caught with >= 1-beta
    regression   if effect >  T_run
    improvement  if effect < -T_run
    pass         if |effect| + t(1-beta) * se_run <= D                 a change of size D is excluded
    inconclusive otherwise

``se_ref`` is the prediction error of a run measured like the baseline's runs, ``se_run`` that of this run.
When this run is no noisier than the baseline's (se_run <= se_ref) every outcome is decided: |effect| <= T_run
implies the pass condition. Inconclusive is what a run noisier than its baseline gets until more windows
bring se_run down, and what it keeps at the budget: then it is not a pass. A pass's point estimate is within
T_run, not necessarily within the floor: se_run keeps the between-run term however many windows are measured.

Family (``gate_alpha``): a scenario's gating metrics share ``FAMILY_ALPHA`` (Bonferroni over metrics and sides)
so that a whole clean run goes red at most 1 time in 20.

Contrast (two arms of one live engine in mirrored blocks, ``decide_contrast``): the run's own blocks are the
noise and the candidate may lose by a margin (``bound``). A pass promises two things: the point estimate is within
the bound (``effect <= max(margin, floor)``), and the run excludes a worsening beyond the bound, either by
resolution (it catches ``D - margin`` within the metric's contrast ceiling) or by its interval: the one-sided
``1 - alpha`` upper limit of the effect, ``effect + t(1-alpha) se``, lies within the bound (the non-inferiority
test; a candidate better than the reference beyond the noise is its special case). A point estimate beyond the bound
that the run cannot flag yet is inconclusive: more blocks flag it or bring it back within the bound, or it stays so
at the budget. A contrast goes red on one side only (a candidate better than the reference passes), so its family
splits alpha over its metrics, not over two sides (``gate_alpha(..., sides=1)``).

Groups of separate engines (the A/B of two builds, transports; ``decide_contrast`` with ``null``): the instance
group is the unit, since two starts of one build differ (TPOT 3 %, TTFT 5 % on the 4B shape). With this host's
A/A history (``NullSample``: the unit effects of null A/B runs, whose true effect is 0) the variance is pooled::

    s^2 = (sum of the null units' e^2 + sum (e - mean)^2 of this run's units) / (K + n - 1),  se = s / sqrt(n)

with ``K + n - 1`` degrees of freedom, so three fresh pairs can promise what the between-instance spread allows
instead of what t with 2 degrees of freedom does. Without a history, t with this run's own ``n - 1``.

Bound (a same-run invariant "ratio >= bound", ``decide_bound``): regression when the one-sided interval
of the ratio lies below the bound, pass when it lies above, inconclusive while it straddles it. The ratio is the
20 % trimmed mean of the per-round log ratios with Yuen's interval, since single windows stall.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
from scipy import stats
from scipy.stats import mstats

from engine_fixtures.judge.noise import NoiseModel, run_within_sd

Status = Literal["pass", "regression", "improvement", "inconclusive"]
ALPHA = 0.01
BETA = 0.10
MIN_BLOCKS = 3
BOUND_TRIM = 0.2  # an invariant's rounds trimmed from each side (decide_bound): Wilcox's default for Yuen's test
FAMILY_ALPHA = 0.05  # a whole clean run of one scenario (all gating metrics, both sides) goes red <= 1 in 20
DEFAULT_AB_DETECT = math.log1p(0.10)  # what an A/B promises when a metric declares nothing else


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


def gate_alpha(alpha: float, family: int = 1, sides: int = 2) -> float:
    """The per-side alpha of one cell when ``family`` gating metrics of one scenario are judged together: a
    whole clean run (``family`` metrics, every side that can go red, every look) goes red at most ``FAMILY_ALPHA``
    of the time (Bonferroni), and never looser than ``alpha`` itself. ``alpha`` is already per look (``Budget``).
    ``sides``: 2 where a cell is red on either side (a pool's regression or improvement, an A/B's improvement), 1
    where only a worsening is red (a live contrast)."""
    if family < 1:
        raise ValueError(f"a family has at least one metric, got {family}")
    if sides not in (1, 2):
        raise ValueError(f"a cell goes red on 1 or 2 sides, got {sides}")
    return alpha * min(1.0, FAMILY_ALPHA / (sides * family * ALPHA))


def promised_size(model: NoiseModel, floor: float, alpha: float = ALPHA, beta: float = BETA) -> float:
    """What a pool promises to catch (judged scale): ``max(floor, t(1-alpha) se_ref) + t(1-beta) se_ref`` for a
    run measured like the pool's runs. The one formula: the gate, ``perf-baseline show``, the update diffs and
    the README's tables all call this with the gate's own per-look, per-family alpha."""
    se_ref, df_ref = model.prediction(model.typical_windows)
    return max(floor, q(1 - alpha, df_ref) * se_ref) + q(1 - beta, df_ref) * se_ref


def runs_to_promise(model: NoiseModel, floor: float, limit: float, alpha: float = ALPHA, beta: float = BETA,
                    most: int = 50) -> int | None:
    """The smallest pool size whose promise is <= ``limit`` if more runs as noisy as these were pooled (None:
    not within ``most`` runs; the machine or the window is too noisy)."""
    n = model.typical_windows
    for k in range(model.runs + 1, most + 1):
        bigger = replace(model, runs=k, windows=(n,) * k, within_df=k * (n - 1))
        if promised_size(bigger, floor, alpha, beta) <= limit:
            return k
    return None


def decide_history(model: NoiseModel, current: Sequence[float], sign: float, floor: float,
                  alpha: float = ALPHA, beta: float = BETA, max_detect: float | None = None) -> Decision:
    """This run's windows ``current`` (judged scale) against the pooled ``model``; ``sign`` is +1 when larger is
    worse, -1 when larger is better; ``floor`` is the declared smallest change worth flagging (judged scale);
    ``max_detect`` the widest promise the metric accepts (judged scale): a pool that promises less is too wide to
    gate, and its ``pass`` is ``inconclusive`` naming the pool size that would do."""
    cur = np.asarray(current, dtype=float)
    if cur.size == 0:
        raise ValueError("no windows in this run to judge")
    reason = model.unusable()
    effect = sign * (float(cur.mean()) - model.level)
    if reason is not None:
        return Decision("inconclusive", effect, math.nan, math.nan, math.nan, None, reason)
    se_run, df_run = model.prediction(cur.size, run_within_sd(model, cur))
    threshold = max(floor, q(1 - alpha, df_run) * se_run)
    detectable = promised_size(model, floor, alpha, beta)
    why = (f"this run ({cur.size} windows) is noisier than its baseline's runs: prediction error {se_run:.3g} vs "
           f"{model.prediction(model.typical_windows)[0]:.3g}; more windows or a quieter machine")
    d = _classify(effect, se_run, df_run, threshold, detectable, beta, why)
    if d.status == "pass" and max_detect is not None and detectable > max_detect:
        k = runs_to_promise(model, floor, max_detect, alpha, beta)
        more = (f"a pool of {k} such runs would (`perf-baseline update --from-runs {k}`)" if k is not None else
                "no pool of <= 50 such runs would: the spread between runs (engine starts) dominates; judge "
                "this change by the A/B against a reference build (--perf-reference) or on a quieter machine")
        return replace(d, status="inconclusive", reason=f"the pool of {model.runs} runs is too wide to gate: it "
                       f"promises {detectable:.3g} where the metric accepts at most {max_detect:.3g} (judged "
                       f"scale); {more}")
    return d


def _units(r: np.ndarray) -> tuple[float, float, float, int, int] | float:
    """``(mean, sd, se, df, n)`` of per-unit effects, or just their mean (nan when none) with fewer than
    ``MIN_BLOCKS`` units: a paired interval needs that many."""
    if r.size < MIN_BLOCKS:
        return float(r.mean()) if r.size else math.nan
    sd = float(r.std(ddof=1))
    return float(r.mean()), sd, sd / math.sqrt(r.size), r.size - 1, r.size


def decide_bound(log_ratios: Sequence[float], bound: float, alpha: float = ALPHA) -> Decision:
    """Invariant ``exp(trimmed mean log ratio) >= bound`` from per-round log ratios (larger is better).

    ``effect`` = log(bound) - the ``BOUND_TRIM`` trimmed mean of the log ratios (> 0: violated by that much); its
    standard error Yuen's, the winsorized sd over ``(1 - 2 x BOUND_TRIM) sqrt(n)`` (``mstats.trimmed_stde``),
    with ``n - 2g - 1`` df for the ``g = floor(BOUND_TRIM n)`` rounds trimmed from each side."""
    r = np.asarray(log_ratios, dtype=float)
    if not bound > 0:
        raise ValueError(f"bound must be > 0, got {bound}")
    target = math.log(bound)
    p = r.size
    if p < MIN_BLOCKS:
        effect = target - float(r.mean()) if p else math.nan
        return Decision("inconclusive", effect, math.nan, math.nan, 0.0, None,
                        f"{p} paired round(s); the invariant needs >= {MIN_BLOCKS}")
    # Yuen's trimmed mean: a round with one slow window (1-3 windows in 40 run 20-40 % slow on the 2-core boxes, their
    # producer at its full quota: more CPU per request) widens a mean's interval past the bound while the other
    # rounds agree within a few per cent.
    effect = target - float(stats.trim_mean(r, BOUND_TRIM))
    se = float(mstats.trimmed_stde(r, (BOUND_TRIM, BOUND_TRIM)))
    return _bound_decision(effect, se, p - 2 * int(BOUND_TRIM * p) - 1, bound, alpha, "more rounds")


@dataclass(frozen=True)
class NullSample:
    """Unit effects of null comparisons (both sides the same build), pooled as ``sum_sq = sum(e^2)`` over ``units``
    (their true effect is 0), and where they came from (for the verdict's message)."""

    sum_sq: float
    units: int
    source: str

    @classmethod
    def of(cls, effects: Sequence[float], source: str) -> NullSample:
        e = np.asarray([x for x in effects if math.isfinite(x)], dtype=float)
        return cls(float((e ** 2).sum()), int(e.size), source)


def _judged(effect: float) -> str:
    return f"{effect:.3g} (judged scale)"


def _pooled_units(r: np.ndarray, null: NullSample) -> tuple[float, float, float, int, int] | float:
    """``_units`` with the variance pooled with ``null``'s (one unit of this run is enough)."""
    if r.size < 1 or null.units + r.size - 1 < MIN_BLOCKS - 1:
        return float(r.mean()) if r.size else math.nan
    df = null.units + r.size - 1
    sd = math.sqrt((null.sum_sq + float(((r - r.mean()) ** 2).sum())) / df)
    return float(r.mean()), sd, sd / math.sqrt(r.size), df, r.size


def decide_contrast(block_effects: Sequence[float], sign: float, margin: float, floor: float, ceiling: float,
                    budget: int, alpha: float = ALPHA, beta: float = BETA, null: NullSample | None = None,
                    show: Callable[[float], str] = _judged) -> Decision:
    """Two arms of one live engine: per-block ``mean log(candidate) - mean log(reference)`` (judged scale), the
    candidate allowed to be worse by ``margin`` (judged scale: ``-log(bound)`` for "candidate >= bound x reference",
    0 for "no worse"). The run's own blocks are the noise::

        allowed = max(margin, floor)                the bound (for "no worse": the floor, never flagged below it)
        T = max(floor, margin + t(1-alpha) se)      flagged beyond this (the candidate worse than the margin allows)
        D = T + t(1-beta) se                        a candidate worse by D is caught with >= 1-beta (``detectable``)
        regression    if effect > T
        pass          if effect <= allowed                       (the point estimate is within the bound)
                      and (D - margin <= ceiling                 (the run catches a worsening of D - margin
                                                                  beyond the bound: ``catches``)
                           or effect + t(1-alpha) se <= allowed) (or its one-sided interval lies within the bound:
                                                                  non-inferiority shown, whatever the resolution;
                                                                  ``reason`` says so)
        inconclusive  otherwise: too few blocks, a point estimate beyond the bound that the run cannot flag yet,
                      or an interval too wide to promise within ``ceiling``

    No between-engine term enters: both arms ran on the same engine instance, interleaved in mirrored blocks, so
    the instance's offset cancels. For members on separate engines the effects are per instance group and ``null``
    (this host's A/A history) pools the variance (module docstring). ``budget`` (the most units the runner
    measures) only enters the message; ``show`` writes an effect (judged scale) as the reason says it, e.g. as the
    candidate's ratio to the reference."""
    r = sign * np.asarray(block_effects, dtype=float)
    r = r[np.isfinite(r)]
    units = _units(r) if null is None else _pooled_units(r, null)
    if isinstance(units, float):
        need = f"a contrast needs >= {MIN_BLOCKS}" if null is None else \
            f"with {null.units} null unit(s) from {null.source} the pooled variance needs >= {MIN_BLOCKS - 1} df"
        return Decision("inconclusive", units, math.nan, math.nan, math.nan, None, f"{r.size} unit(s); {need}")
    effect, sd, se, df, p = units
    ta, tb = q(1 - alpha, df), q(1 - beta, df)
    threshold = max(floor, margin + ta * se)
    detectable = threshold + tb * se
    allowed = max(margin, floor)
    decision = Decision("pass", effect, se, df, threshold, detectable)
    if effect > threshold:
        return replace(decision, status="regression")
    if effect > allowed:  # beyond the bound, not yet flagged: only more units can tell which
        need = math.ceil((ta * sd / (effect - margin)) ** 2)
        bound = _bound_name(allowed, margin, floor, show)
        return replace(decision, status="inconclusive", reason=(
            f"the point estimate {show(effect)} lies beyond {bound}, but the run cannot flag it yet (flagged beyond "
            f"{show(threshold)}); about {max(need, p + 1)} units would if it holds (budget {budget})"))
    if detectable - margin <= ceiling:
        return decision
    if effect + ta * se <= allowed:
        return replace(decision, reason=(f"its one-sided {1 - alpha:.2%} interval ends at {show(effect + ta * se)}, "
                                         f"within {_bound_name(allowed, margin, floor, show)}"))
    per_block = (ta + tb) * sd
    need = math.ceil((per_block / ceiling) ** 2) if ceiling > 0 else p + 1
    return replace(decision, status="inconclusive", reason=(
        f"the point estimate {show(effect)} is within the bound, but {p} units (se {se:.3g}) resolve "
        f"{detectable - margin:.3g} beyond it, wider than the {ceiling:.3g} a contrast may promise (judged scale); "
        f"about {max(need, p + 1)} units would (budget {budget})"))


def _bound_name(allowed: float, margin: float, floor: float, show: Callable[[float], str]) -> str:
    return f"the bound{' (the floor)' if floor > margin else ''} {show(allowed)}"


def _bound_decision(effect: float, se: float, df: float, bound: float, alpha: float, more: str) -> Decision:
    half = q(1 - alpha, df) * se
    if effect > half:
        return Decision("regression", effect, se, df, half, None)
    if effect < -half:
        return Decision("pass", effect, se, df, half, None)
    return Decision("inconclusive", effect, se, df, half, None,
                    f"the one-sided {1 - alpha:.1%} interval of the ratio ({math.exp(-effect - half) * bound:.3f}-"
                    f"{math.exp(-effect + half) * bound:.3f}x) straddles the bound {bound:g}x; {more}")

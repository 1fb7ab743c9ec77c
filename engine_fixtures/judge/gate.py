"""The statistical gate: a regression must be beyond tolerance AND significant given the repeats.

Contract of ``judge(metric, baseline, current, tolerance=None)``:
- ``no-baseline`` when there is no baseline sample; ``report-only`` for metrics that do not gate.
- ``unstable`` when either side has fewer than ``MIN_SAMPLES`` (3) repeats or a coefficient of
  variation >= ``MAX_CV`` (10 %): reported, never silently judged.
- ``regression`` when the relative median change is beyond ``tolerance`` in the metric's bad
  direction AND a one-sided Mann-Whitney U test (``scipy.stats.mannwhitneyu``; exact for small n)
  gives ``p <= ALPHA`` (0.05). With 3 vs 3 repeats the smallest exact p is 1/20 = 0.05, so three
  repeats can only flag a complete separation of the two samples.
- ``improvement`` symmetrically in the good direction; ``pass`` otherwise.
- Invariant under scaling both samples by the same positive factor; ``delta`` is
  ``(current_median - baseline_median) / |baseline_median|`` (signed, raw direction).
``judge_ratio`` applies the same machinery to a cross-arm invariant "current >= min_ratio x
reference" (in the metric's good direction).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from scipy.stats import mannwhitneyu

from engine_fixtures.judge.metrics import Metric, metric
from engine_fixtures.judge.summary import summarize

ALPHA = 0.05
MIN_SAMPLES = 3
MAX_CV = 0.10

Status = Literal["pass", "regression", "improvement", "unstable", "no-baseline", "report-only"]
STATUSES: tuple[str, ...] = ("regression", "unstable", "no-baseline", "improvement", "pass", "report-only")


@dataclass(frozen=True)
class Verdict:
    """One metric's judgement. ``delta`` is relative and signed (current vs baseline, raw direction)."""

    metric: str
    status: Status
    baseline_median: float | None
    current_median: float | None
    delta: float | None
    p_value: float | None
    message: str
    tolerance: float | None = None


def _as_metric(m: Metric | str) -> Metric:
    return m if isinstance(m, Metric) else metric(m)


def relative_delta(baseline_median: float, current_median: float) -> float:
    if baseline_median == current_median:
        return 0.0
    if baseline_median == 0.0:
        return math.copysign(math.inf, current_median)
    return (current_median - baseline_median) / abs(baseline_median)


def _unstable_reason(label: str, values: Sequence[float]) -> str | None:
    if len(values) < MIN_SAMPLES:
        return (f"{label} has {len(values)} repeats (< {MIN_SAMPLES}); "
                f"run with --perf-repeats >= {MIN_SAMPLES}")
    cv = summarize(values).cv
    if cv >= MAX_CV:
        return f"{label} CV is {cv:.1%} (>= {MAX_CV:.0%}); the machine is too noisy to judge, reduce noise"
    return None


def _significant(p: float) -> bool:
    """``p <= ALPHA`` with a hair of slack so the exact 3-vs-3 p of 1/20 is not lost to rounding."""
    return p <= ALPHA * (1 + 1e-9)


def _p_worse(m: Metric, reference: Sequence[float], current: Sequence[float]) -> float:
    """One-sided p that ``current`` is worse than ``reference`` in ``m``'s direction."""
    alternative = "less" if m.direction == "higher" else "greater"
    return float(mannwhitneyu(current, reference, alternative=alternative).pvalue)


def _p_better(m: Metric, reference: Sequence[float], current: Sequence[float]) -> float:
    alternative = "greater" if m.direction == "higher" else "less"
    return float(mannwhitneyu(current, reference, alternative=alternative).pvalue)


def judge(m: Metric | str, baseline: Sequence[float] | None, current: Sequence[float],
          tolerance: float | None = None) -> Verdict:
    """Judge ``current`` repeats of metric ``m`` against ``baseline`` repeats (see module contract)."""
    m = _as_metric(m)
    current = [float(v) for v in current]
    if not current:
        raise ValueError(f"{m.name}: no current samples to judge")
    cur = summarize(current).median
    baseline = [] if baseline is None else [float(v) for v in baseline]
    if not baseline:
        return Verdict(m.name, "no-baseline", None, cur, None, None, f"{m.name}: no baseline")
    base = summarize(baseline).median
    delta = relative_delta(base, cur)
    tol = m.tolerance if tolerance is None or not m.gates else tolerance
    head = f"{m.name}: {base:.4g} -> {cur:.4g} {m.unit} ({delta:+.1%})"
    if not m.gates:
        return Verdict(m.name, "report-only", base, cur, delta, None, head + ", report only", None)
    reason = _unstable_reason("baseline", baseline) or _unstable_reason("current", current)
    if reason is not None:
        return Verdict(m.name, "unstable", base, cur, delta, None, f"{head}, unstable: {reason}", tol)
    worse = m.worse(delta)
    if worse > tol:
        p = _p_worse(m, baseline, current)
        if _significant(p):
            return Verdict(m.name, "regression", base, cur, delta, p,
                           f"{head}: worse than the {tol:.0%} tolerance, Mann-Whitney p={p:.3g} <= {ALPHA}",
                           tol)
        return Verdict(m.name, "pass", base, cur, delta, p,
                       f"{head}: beyond tolerance but not significant (p={p:.3g} > {ALPHA})", tol)
    if -worse > tol:
        p = _p_better(m, baseline, current)
        if _significant(p):
            return Verdict(m.name, "improvement", base, cur, delta, p,
                           f"{head}: better than the {tol:.0%} tolerance (p={p:.3g}); consider updating the "
                           "baseline", tol)
        return Verdict(m.name, "pass", base, cur, delta, p, f"{head}: not significant (p={p:.3g})", tol)
    return Verdict(m.name, "pass", base, cur, delta, None, f"{head}: within {tol:.0%}", tol)


def judge_ratio(m: Metric | str, reference_samples: Sequence[float], current_samples: Sequence[float],
                min_ratio: float, label: str = "") -> Verdict:
    """Invariant "current is at least ``min_ratio`` x as good as reference" for metric ``m``.

    For a higher-is-better metric the ratio is current/reference; for lower-is-better it is
    reference/current. A violation (status ``regression``) needs ratio < ``min_ratio`` AND a one-sided
    Mann-Whitney U test of current against the reference scaled to the bound at ``p <= ALPHA``.
    """
    m = _as_metric(m)
    if m.direction == "none":
        raise ValueError(f"{m.name} has no direction; a ratio invariant needs a higher/lower metric")
    if not min_ratio > 0:
        raise ValueError(f"min_ratio must be > 0, got {min_ratio}")
    ref = [float(v) for v in reference_samples]
    cur = [float(v) for v in current_samples]
    if not ref or not cur:
        raise ValueError(f"{m.name}: a ratio invariant needs samples on both sides")
    ref_med, cur_med = summarize(ref).median, summarize(cur).median
    name = f"{m.name} ratio{' ' + label if label else ''}"
    if m.direction == "higher":
        ratio = cur_med / ref_med if ref_med else math.inf
        bound = [v * min_ratio for v in ref]
    else:
        ratio = ref_med / cur_med if cur_med else math.inf
        bound = [v / min_ratio for v in ref]
    delta = relative_delta(ref_med, cur_med)
    head = f"{name}: {ratio:.3f}x (need >= {min_ratio:.3g}x; reference {ref_med:.4g}, current {cur_med:.4g})"
    reason = _unstable_reason("reference", ref) or _unstable_reason("current", cur)
    if reason is not None:
        return Verdict(name, "unstable", ref_med, cur_med, delta, None, f"{head}, unstable: {reason}",
                       min_ratio)
    if ratio >= min_ratio:
        return Verdict(name, "pass", ref_med, cur_med, delta, None, head, min_ratio)
    p = _p_worse(m, bound, cur)
    if _significant(p):
        return Verdict(name, "regression", ref_med, cur_med, delta, p,
                       f"{head}: invariant violated, Mann-Whitney p={p:.3g} <= {ALPHA}", min_ratio)
    return Verdict(name, "pass", ref_med, cur_med, delta, p, f"{head}: below but not significant (p={p:.3g})",
                   min_ratio)

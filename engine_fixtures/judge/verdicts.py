"""Verdicts for the report: every judged (arm, metric) ends ``pass``, ``regression``, ``improvement`` or
``inconclusive``; ``no-baseline`` and ``report-only`` (diagnostics) are the only other rows, and neither is a pass.

Three kinds of judgement, all through ``judge.decide``:
- ``history``: this run's windows against the pooled baseline of the scenario (``judge_result``);
- ``paired``: a candidate against a reference measured in interleaved blocks (``judge_ab``);
- ``bound``: a same-run invariant such as "buffer >= 1.05 x torch" (``judge_invariant``).

``delta`` is the change of the current level against the baseline's (relative for log-scale metrics,
absolute for linear ones, signed in the raw direction). ``detectable`` is the change in the bad direction that
the gate promises to catch with probability >= 1 - beta, from the noise it measured: the README's table.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np

from engine_fixtures.errors import MeasurementError
from engine_fixtures.judge.decide import (
    ALPHA,
    BETA,
    Decision,
    judge_bound,
    judge_bound_unpaired,
    judge_history,
    judge_paired,
    q,
)
from engine_fixtures.judge.metrics import GPU_BOUND, Metric, metric
from engine_fixtures.judge.noise import MIN_RUNS, NoiseModel

Status = Literal["pass", "regression", "improvement", "inconclusive", "no-baseline", "report-only"]
Kind = Literal["history", "paired", "bound", "diagnostic"]
VERDICTS: tuple[str, ...] = ("pass", "regression", "improvement", "inconclusive")
STATUSES: tuple[str, ...] = ("regression", "inconclusive", "improvement", "no-baseline", "pass", "report-only")
GPU_BOUND_UTIL = 60.0  # % mean utilisation in the baseline above which the GPU is the arm's bottleneck


class PooledRuns(Protocol):
    """What the judge needs of a stored baseline: per-run window values of a metric."""

    def runs_for(self, name: str) -> list[tuple[float, ...]]: ...


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

    @property
    def is_verdict(self) -> bool:
        return self.status in VERDICTS

    def change_text(self, value: float | None) -> str:
        if value is None or not math.isfinite(value):
            return "-"
        return f"{value:+.1%}" if self.scale == "log" else f"{value:+.3g}"


def _level(m: Metric, values: Sequence[float]) -> float:
    """The natural-unit level of ``values``: geometric mean on the log scale, mean on the linear one."""
    x = m.scale.forward(values)
    return float(math.exp(x.mean())) if m.scale.name == "log" else float(x.mean())


def worse_change(m: Metric, size: float) -> float:
    """A size on the judged scale as the change in the metric's bad direction (relative for log)."""
    if m.scale.name == "linear":
        return size
    return math.expm1(size) if m.direction == "lower" else -math.expm1(-size)


def _delta(m: Metric, base: float, cur: float) -> float:
    if m.scale.name == "linear":
        return cur - base
    return cur / base - 1.0 if base else math.inf


def _message(m: Metric, d: Decision, base: float, cur: float, delta: float, runs: int | None) -> str:
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
                   len(current), f"{m.name}: {cur:.4g} {m.unit}, reported, not judged ({why})", "linear")


def judge_metric(m: Metric | str, runs: Sequence[Sequence[float]], current: Sequence[float], *,
                 alpha: float = ALPHA, floor: float | None = None) -> Verdict:
    """History judgement of one metric: ``current`` windows against the pooled baseline ``runs``."""
    m = m if isinstance(m, Metric) else metric(m)
    if not current:
        raise MeasurementError(f"{m.name}: no windows measured; a metric with no data is an error, not a pass")
    cur_level = _level(m, current)
    if not runs:
        return Verdict(m.name, "no-baseline", "history", None, cur_level, None, None, None, len(current),
                       f"{m.name}: no baseline", m.scale.name)
    model = NoiseModel.fit([m.scale.forward(r) for r in runs])
    if model.runs < MIN_RUNS:  # a pool still being built is not a baseline yet
        level = math.exp(model.level) if m.scale.name == "log" else model.level
        return Verdict(m.name, "no-baseline", "history", level, cur_level, _delta(m, level, cur_level), None,
                       model.runs, len(current), f"{m.name}: the baseline pools {model.runs} run(s) and judges from "
                       f"{MIN_RUNS}; add {MIN_RUNS - model.runs} more independent run(s)", m.scale.name)
    floor_size = m.scale.size(floor) if floor is not None else m.scale_floor
    d = judge_history(model, m.scale.forward(current), m.sign, floor_size, alpha=alpha, beta=BETA)
    base_level = math.exp(model.level) if m.scale.name == "log" else model.level
    delta = _delta(m, base_level, cur_level)
    detectable = worse_change(m, d.detectable) if d.detectable is not None else None
    return Verdict(m.name, d.status, "history", base_level, cur_level, delta, detectable, model.runs,
                   len(current), _message(m, d, base_level, cur_level, delta, model.runs), m.scale.name)


def judge_result(samples: Mapping[str, Sequence[float]], baseline: PooledRuns | None, *, scenario: str,
                 alpha: float = ALPHA, floor: float | None = None) -> list[Verdict]:
    """Every metric of one run against its pooled baseline (None: no baseline for the scenario).

    A judged metric that the baseline has but this run lacks is a ``MeasurementError`` (a measurement lost
    it), never a silently skipped row."""
    verdicts = []
    for name, values in samples.items():
        m = metric(name)
        runs = baseline.runs_for(name) if baseline is not None else []
        if not m.judged:
            verdicts.append(diagnostic(m, values, runs))
            continue
        if m.condition == GPU_BOUND and runs:
            util = float(np.mean([v for r in runs for v in r]))
            if util < GPU_BOUND_UTIL:
                verdicts.append(diagnostic(m, values, runs, f"the GPU is not this arm's bottleneck (baseline mean "
                                           f"{util:.0f}% < {GPU_BOUND_UTIL:.0f}%); judged on GPU-bound arms only"))
                continue
        verdicts.append(judge_metric(m, runs, values, alpha=alpha, floor=floor))
    if baseline is not None:
        for name in _judged_in_baseline(baseline, samples):
            raise MeasurementError(f"{scenario}: the baseline judges {name!r} but this run did not measure it; "
                                   "the measurement lost a metric (a sampler that did not run, a counter that "
                                   "stayed empty): fix the measurement, or re-record the baseline without it")
    return verdicts


def _judged_in_baseline(baseline: PooledRuns, samples: Mapping[str, Sequence[float]]) -> list[str]:
    names = getattr(baseline, "metric_names", lambda: [])()
    out = []
    for name in names:
        m = metric(name)
        if m.judged and m.condition is None and name not in samples and baseline.runs_for(name):
            out.append(name)
    return out


def judge_ab(m: Metric | str, reference: Sequence[float], candidate: Sequence[float],
             block_effects: Sequence[float], *, budget: int, alpha: float = ALPHA,
             floor: float | None = None) -> Verdict:
    """Paired judgement of candidate vs reference windows measured in ABBA blocks; ``block_effects`` holds one
    value per block: mean log(candidate) - mean log(reference) (linear metrics: the difference)."""
    m = m if isinstance(m, Metric) else metric(m)
    floor_size = m.scale.size(floor) if floor is not None else m.scale_floor
    d = judge_paired(block_effects, m.sign, floor_size, budget, alpha=alpha, beta=BETA)
    ref, cur = _level(m, reference), _level(m, candidate)
    raw = float(np.mean(block_effects)) if len(block_effects) else math.nan
    log = m.scale.name == "log"
    delta = math.expm1(raw) if log else raw
    detectable = worse_change(m, d.detectable) if d.detectable is not None else None
    msg = _message(m, d, ref, cur, delta, None)
    if len(block_effects) >= 2 and math.isfinite(d.se):
        half = d.se * _q95(d.df)
        lo, hi = raw - half, raw + half
        msg += (f"; paired ratio {math.exp(raw):.3f}x, 95% CI {math.exp(lo):.3f}-{math.exp(hi):.3f}x" if log else
                f"; paired difference {raw:+.3g}, 95% CI {lo:+.3g}..{hi:+.3g} {m.unit}") + \
            f" over {len(block_effects)} blocks"
    return Verdict(m.name, d.status, "paired", ref, cur, delta, detectable, None, len(block_effects), msg,
                   m.scale.name)


def _q95(df: float) -> float:
    return q(0.975, df)


def judge_invariant(label: str, m: Metric | str, reference: Sequence[float], current: Sequence[float],
                    bound: float, *, paired: bool, alpha: float = ALPHA) -> Verdict:
    """Same-run invariant ``current >= bound x reference`` in ``m``'s good direction.

    ``paired``: windows i of both came from the same round (interleaved), so per-round ratios are judged;
    otherwise (separate engines measured one after the other) the two samples' log means are compared with a
    Welch interval, which knows only the spread inside each run."""
    m = m if isinstance(m, Metric) else metric(m)
    if m.direction == "none":
        raise ValueError(f"{m.name} has no direction; an invariant needs a higher/lower metric")
    ref = np.log(np.asarray(reference, dtype=float))
    cur = np.log(np.asarray(current, dtype=float))
    good = -m.sign  # +1 when larger is better
    if paired:
        if ref.size != cur.size:
            raise ValueError(f"{label}: a paired invariant needs one window of each per round "
                             f"({ref.size} vs {cur.size})")
        ratios = good * (cur - ref)
        d = judge_bound(ratios, bound, alpha=alpha)
    else:
        d = judge_bound_unpaired(good * ref, good * cur, bound, alpha=alpha)
    ratio = math.exp(good * (cur.mean() - ref.mean()))
    name = f"{m.name} ratio {label}".strip()
    head = f"{name}: {ratio:.3f}x (invariant >= {bound:g}x; reference {math.exp(ref.mean()):.4g}, current " \
           f"{math.exp(cur.mean()):.4g} {m.unit}, {'paired rounds' if paired else 'separate runs'})"
    msg = head + (f": inconclusive: {d.reason}" if d.status == "inconclusive" else
                  ": invariant violated" if d.status == "regression" else ": holds")
    return Verdict(name, d.status, "bound", math.exp(ref.mean()), math.exp(cur.mean()), ratio - 1.0, None, None,
                   int(min(ref.size, cur.size)), msg, "log")

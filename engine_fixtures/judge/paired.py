"""Paired and same-run judgements as verdict rows: a contrast between two arms, on one live engine or on separate
launches (``judge_contrast``), and the CPU tier's per-round invariants (``judge_invariant``)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

import numpy as np

from engine_fixtures.judge.blocks import effects_by_block
from engine_fixtures.judge.decide import (
    ALPHA,
    BOUND_TRIM,
    Decision,
    NullSample,
    decide_bound,
    decide_contrast,
    gate_alpha,
    q,
)
from engine_fixtures.judge.gating import gates
from engine_fixtures.judge.metrics import Metric, metric
from engine_fixtures.judge.rows import Verdict, as_diagnostic, level, with_interval, worse_change

LOG_RATIO = "requests_per_s"  # any log-scale metric: an invariant is a ratio, whatever its metric's own scale
GROUP_CEILING_FACTOR = 2.0  # a group of separate engines may promise twice a live contrast's ceiling (below)


def _margin(m: Metric, bound: float, ref: float) -> float:
    """The loss ``bound`` allows (judged scale): its log, or on a linear metric in the metric's unit at the
    reference's level."""
    return max(0.0, -math.log(bound)) if m.scale.name == "log" else max(0.0, (1.0 - bound) * abs(ref))


def _shown(m: Metric) -> Callable[[float], str]:
    """How a contrast's reason writes an effect (judged scale, > 0 worse): the candidate's ratio to the reference
    in the metric's good direction (as the bound reads), or the change in the metric's unit."""
    if m.scale.name == "log":  # a latency's good-direction ratio is reference / candidate: say so beside the
        # message's paired ratio (candidate / reference), or "0.970x" next to "1.030x" reads as a contradiction
        side = "" if m.direction == "higher" else " (reference / candidate)"
        return lambda e: f"{math.exp(-e):.3f}x{side}"
    return lambda e: f"{e:.3g} {m.unit} worse"


def _catches(m: Metric, d: Decision, margin: float, bound: float) -> tuple[float | None, str]:
    """What a decided contrast catches beyond its bound, ``D - margin`` as a change in the bad direction (the
    margin the bound allows is not counted again), and how the message says it."""
    if d.detectable is None:
        return None, ""
    size = worse_change(m, d.detectable - margin)
    shown = f"{size:.1%}" if m.scale.name == "log" else f"{size:.3g} {m.unit}"
    return size, (f"catches {shown} worse than the reference" if bound == 1.0 else
                  f"catches {shown} beyond the {bound:g}x bound")


UNITS = ("engine blocks", "groups", "pair blocks")


def judge_contrast(label: str, m: Metric | str, reference: Sequence[float], candidate: Sequence[float],
                   effects: Sequence[float], *, units: str = "engine blocks", bound: float = 1.0, budget: int,
                   alpha: float = ALPHA, floor: float | None = None, family: int = 1, ceiling: float | None = None,
                   detect: float | None = None, null: NullSample | None = None,
                   arm: Mapping[str, str] | None = None) -> Verdict:
    """``candidate >= bound x reference`` in ``m``'s good direction (1.0: no worse), judged by the contrast rule
    (``decide_contrast``) from ``effects``: one ``mean log(candidate) - mean log(reference)`` per unit (linear: the
    difference). ``units`` says what a unit is:

    - ``"engine blocks"``: the mirrored blocks of two arms of one live engine (``judge.blocks``); no between-engine
      term enters. Only a worsening is red: ``family`` metrics share ``alpha`` on one side. ``ceiling`` (judged
      scale) defaults to the metric's ``ab_detect``.
    - ``"groups"``: fresh instance groups of separate launches (a group's blocks' mean effect,
      ``judge.blocks.unit_means``), so the offset between two starts of one build is inside the interval; ``null``
      (this host's A/A history) pools the variance, else t with the run's own ``n - 1`` df;
    - ``"pair blocks"``: the blocks of one pair of separate engines: the instance offset is NOT in the interval, and
      the message says so.

    For separate launches both sides count (an A/B's better candidate is an ``improvement``) and the ceiling is
    ``detect`` (``--perf-ab-detect``) or ``GROUP_CEILING_FACTOR`` times the metric's ``ab_detect`` (20 % for
    throughput, TTFT and TPOT: three fresh 4B pairs resolve 11-17 % with the between-instance variance known, H200
    2026-12-01).

    ``pass`` means the point estimate is within the bound (for 1.0: within the metric's floor) and the run excludes a
    worsening beyond it: ``catches`` (the row's ``detectable``) is the change beyond the bound that this run would
    have flagged with probability >= 90 %, within the ceiling, unless the run's one-sided interval already lies within
    the bound (the message then says where it ends). With ``arm`` given, a metric that does not gate that arm is a
    report-only row."""
    m = m if isinstance(m, Metric) else metric(m)
    if units not in UNITS:
        raise ValueError(f"units {units!r}: one of {', '.join(UNITS)}")
    if m.direction == "none":
        raise ValueError(f"{m.name} has no direction; a contrast needs a higher/lower metric")
    if not bound > 0:
        raise ValueError(f"contrast {label}: bound must be > 0, got {bound}")
    one_engine = units == "engine blocks"
    # One live engine: red on the worse side only (a better candidate passes). Separate launches: both sides.
    a = gate_alpha(alpha, family, sides=1) if one_engine else gate_alpha(alpha, family)
    if ceiling is None:
        ceiling = m.ab_size() if one_engine else m.ab_size(detect) if detect is not None else \
            GROUP_CEILING_FACTOR * m.ab_size()
    ref, cur = level(m, reference), level(m, candidate)
    margin = _margin(m, bound, ref)
    d = decide_contrast(effects, m.sign, margin, m.floor_size(floor), ceiling, budget, alpha=a,
                        null=null if units == "groups" else None, show=_shown(m))
    if not one_engine and d.status == "pass" and bound == 1.0 and d.effect < -d.threshold:
        d = replace(d, status="improvement")
    raw = float(np.mean(effects)) if len(effects) else math.nan
    log = m.scale.name == "log"
    delta = math.expm1(raw) if log else raw
    n = len(effects)
    catches, said = _catches(m, d, margin, bound)
    if one_engine:
        rule = f">= {bound:g}x reference" if bound != 1.0 else "no worse than the reference"
        head = f"{m.name} {label}: {cur:.4g} vs {ref:.4g} {m.unit}{_ci(m, d, raw, n >= 2)}"
        head += f" over {n} mirrored blocks on one engine; candidate {rule}"
        said += f"; {d.reason}" if d.status == "pass" and d.reason else ""  # a pass by its interval says so
        msg = f"{head}: " + (f"inconclusive: {d.reason}" if d.status == "inconclusive" else
                             f"{'holds' if d.status == 'pass' else 'violated'} ({said})")
        return with_interval(Verdict(m.name, d.status, "paired", ref, cur, delta, catches, None, n, msg,
                                     m.scale.name), m, d, a)
    rule = "" if bound == 1.0 else f" (candidate >= {bound:g}x reference)"
    head = f"{m.name}{' ' + label if label else ''}{rule}: {ref:.4g} -> {cur:.4g} {m.unit}{_ci(m, d, raw)}"
    msg = f"{head} {_how(units, n, null, d)}: " + (f"inconclusive: {d.reason}" if d.status == "inconclusive"
                                                    else f"{d.status} ({said})")
    v = with_interval(Verdict(m.name, d.status, "group" if units == "groups" else "paired", ref, cur, delta,
                              catches, None, n, msg, m.scale.name), m, d, a)
    gate = gates(m.name, arm) if arm is not None else m.gates
    return v if gate or not v.is_verdict else as_diagnostic(v, "not a gate of this scenario")


def _ci(m: Metric, d: Decision, raw: float, enough: bool = True) -> str:
    """The paired ratio (log scale) or difference with its 95 % interval, '' without an interval."""
    if not enough or not math.isfinite(d.se):
        return ""
    half = d.se * q(0.975, d.df)
    if m.scale.name == "log":
        return f", paired ratio {math.exp(raw):.3f}x (95% CI {math.exp(raw - half):.3f}-{math.exp(raw + half):.3f}x)"
    return f", paired difference {raw:+.3g} (95% CI {raw - half:+.3g}..{raw + half:+.3g}) {m.unit}"


def _how(units: str, n: int, null: NullSample | None, d: Decision) -> str:
    """What a separate launches' unit is and which variance the verdict used."""
    if units == "pair blocks":
        return (f"over {n} blocks of one engine pair: the offset between two starts of one build is not in this "
                "interval (--perf-ab-instances 3)")
    if null is not None:
        return (f"over {n} fresh engine group(s), variance pooled with {null.units} null pair(s) of {null.source}"
                + (f" ({d.df:g} df)" if math.isfinite(d.df) else ""))
    return (f"over {n} fresh engine group(s), t with {max(n - 1, 0)} df (no A/A history on this host: an A/B "
            "with --perf-candidate equal to --perf-reference records one)")


def judge_invariant(label: str, m: Metric | str, reference: Sequence[float], current: Sequence[float],
                    bound: float, *, alpha: float = ALPHA) -> Verdict:
    """Same-run invariant ``current >= bound x reference`` in ``m``'s good direction, from windows of the same
    rounds (arms interleaved in one rig set, the CPU tier: window i of both came from round i, half a mirrored
    block): per-round ratios are judged by their trimmed mean (``decide_bound``), and ``pass`` needs the one-sided
    interval above the bound."""
    m = m if isinstance(m, Metric) else metric(m)
    if m.direction == "none":
        raise ValueError(f"{m.name} has no direction; an invariant needs a higher/lower metric")
    ref = np.log(np.asarray(reference, dtype=float))
    cur = np.log(np.asarray(current, dtype=float))
    good = -m.sign  # +1 when larger is better
    if ref.size != cur.size:
        raise ValueError(f"{label}: a paired invariant needs one window of each per round ({ref.size} vs {cur.size})")
    rounds = list(range(ref.size))
    effects = np.asarray(effects_by_block(LOG_RATIO, np.exp(ref), rounds, np.exp(cur), rounds))
    d = decide_bound(good * effects, bound, alpha=alpha)
    ratio = bound * math.exp(-d.effect)  # the rounds' trimmed mean, as judged
    name = f"{m.name} ratio {label}".strip()
    head = f"{name}: {ratio:.3f}x (invariant >= {bound:g}x; reference {math.exp(ref.mean()):.4g}, current " \
           f"{math.exp(cur.mean()):.4g} {m.unit}; {BOUND_TRIM:.0%} trimmed mean of {ref.size} paired rounds)"
    msg = head + (f": inconclusive: {d.reason}" if d.status == "inconclusive" else
                  ": invariant violated" if d.status == "regression" else ": holds")
    return Verdict(name, d.status, "bound", math.exp(ref.mean()), math.exp(cur.mean()), ratio - 1.0, None, None,
                   int(min(ref.size, cur.size)), msg, "log")


def judge_rounds(label: str, metrics: Sequence[str], reference: Mapping[str, Sequence[float]],
                 candidate: Mapping[str, Sequence[float]], bound_of: Callable[[str], float],
                 alpha: float = ALPHA) -> list[Verdict]:
    """A contrast of the CPU tier's arms: ``judge_invariant`` per metric against its bound (``Contrast.bound_of``),
    from each arm's samples by metric."""
    return [judge_invariant(label, m, reference[m], candidate[m], bound_of(m), alpha=alpha) for m in metrics]

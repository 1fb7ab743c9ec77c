"""Paired and same-run judgements as verdict rows: the A/B (``judge_ab``), the contrasts between arms of one live
engine (``judge_contrast``) and the invariants (``judge_invariant``)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from engine_fixtures.judge.decide import (
    ALPHA,
    BETA,
    decide_bound,
    decide_bound_unpaired,
    decide_contrast,
    decide_paired,
    gate_alpha,
    q,
)
from engine_fixtures.judge.gating import gates
from engine_fixtures.judge.metrics import Metric, metric
from engine_fixtures.judge.rows import Verdict, as_diagnostic, level, message, with_interval, worse_change


def judge_ab(m: Metric | str, reference: Sequence[float], candidate: Sequence[float],
             block_effects: Sequence[float], *, budget: int, alpha: float = ALPHA,
             floor: float | None = None, detect: float | None = None, family: int = 1,
             arm: Mapping[str, str] | None = None) -> Verdict:
    """Paired judgement of candidate vs reference windows measured in ABBA blocks; ``block_effects`` holds one
    value per block (or per instance pair): mean log(candidate) - mean log(reference) (linear: the difference).

    ``pass`` excludes the metric's declared A/B size (``Metric.ab_detect``; ``detect``, from ``--perf-ab-detect``,
    overrides it on log-scale metrics); an interval that cannot exclude it is ``inconclusive`` with the interval
    printed. ``family`` gating metrics share ``alpha`` (``gate_alpha``); with ``arm`` given, a metric that does
    not gate that arm is a report-only row."""
    m = m if isinstance(m, Metric) else metric(m)
    a = gate_alpha(alpha, family)
    d = decide_paired(block_effects, m.sign, m.floor_size(floor), budget, alpha=a, beta=BETA,
                     detect=m.ab_size(detect))
    ref, cur = level(m, reference), level(m, candidate)
    raw = float(np.mean(block_effects)) if len(block_effects) else math.nan
    log = m.scale.name == "log"
    delta = math.expm1(raw) if log else raw
    detectable = worse_change(m, d.detectable) if d.detectable is not None else None
    msg = message(m, d, ref, cur, delta, None)
    if len(block_effects) >= 2 and math.isfinite(d.se):
        half = d.se * q(0.975, d.df)
        lo, hi = raw - half, raw + half
        msg += (f"; paired ratio {math.exp(raw):.3f}x, 95% CI {math.exp(lo):.3f}-{math.exp(hi):.3f}x" if log else
                f"; paired difference {raw:+.3g}, 95% CI {lo:+.3g}..{hi:+.3g} {m.unit}") + \
            f" over {len(block_effects)} units"
    if d.status == "pass" or d.status == "inconclusive":
        size = f"{worse_change(m, d.detectable):.1%}" if log else f"{d.detectable:.3g} {m.unit}"
        msg += f"; A/B promise: {size} ({'excluded' if d.status == 'pass' else 'not excluded'})"
    v = with_interval(Verdict(m.name, d.status, "paired", ref, cur, delta, detectable, None, len(block_effects), msg,
                              m.scale.name), m, d, a)
    gate = gates(m.name, arm) if arm is not None else m.gates
    return v if gate or not v.is_verdict else as_diagnostic(v, "not a gate of this scenario")


def judge_contrast(label: str, m: Metric | str, reference: Sequence[float], candidate: Sequence[float],
                   block_effects: Sequence[float], *, bound: float = 1.0, budget: int, alpha: float = ALPHA,
                   floor: float | None = None, family: int = 1, ceiling: float | None = None) -> Verdict:
    """``candidate >= bound x reference`` in ``m``'s good direction, for two arms of one live engine measured in the
    same mirrored blocks (``block_effects``: one ``mean log(cand) - mean log(ref)`` per block, from
    ``judge.blocks``). ``pass`` names what it excludes: ``catches`` is the change against the reference (the margin
    the bound allows plus what the blocks resolve) that this run would have flagged with probability >= 90 %.
    ``ceiling`` (judged scale; default the metric's ``ab_detect``) is the widest resolution a pass may have;
    ``family`` metrics of one contrast share ``alpha``."""
    m = m if isinstance(m, Metric) else metric(m)
    if m.direction == "none":
        raise ValueError(f"{m.name} has no direction; a contrast needs a higher/lower metric")
    if not bound > 0:
        raise ValueError(f"contrast {label}: bound must be > 0, got {bound}")
    a = gate_alpha(alpha, family)
    ref, cur = level(m, reference), level(m, candidate)
    # the loss the bound allows: log of it, or on a linear metric in the metric's unit at the reference's level
    margin = max(0.0, -math.log(bound)) if m.scale.name == "log" else max(0.0, (1.0 - bound) * abs(ref))
    d = decide_contrast(block_effects, m.sign, margin, m.floor_size(floor),
                        m.ab_size() if ceiling is None else ceiling, budget, alpha=a)
    raw = float(np.mean(block_effects)) if len(block_effects) else math.nan
    log = m.scale.name == "log"
    delta = math.expm1(raw) if log else raw
    rule = f">= {bound:g}x reference" if bound != 1.0 else "no worse than the reference"
    head = f"{m.name} {label}: {cur:.4g} vs {ref:.4g} {m.unit}"
    if len(block_effects) >= 2 and math.isfinite(d.se):
        half = d.se * q(0.975, d.df)
        head += (f", paired ratio {math.exp(raw):.3f}x (95% CI {math.exp(raw - half):.3f}-{math.exp(raw + half):.3f}x)"
                 if log else f", paired difference {raw:+.3g} (95% CI {raw - half:+.3g}..{raw + half:+.3g}) {m.unit}")
    head += f" over {len(block_effects)} mirrored blocks on one engine; candidate {rule}"
    if d.status == "inconclusive":
        msg = f"{head}: inconclusive: {d.reason}"
    else:
        caught = f"{worse_change(m, d.detectable):.1%}" if log else f"{d.detectable:.3g} {m.unit}"
        msg = f"{head}: {'holds' if d.status == 'pass' else 'violated'} (catches {caught} worse than the reference)"
    v = Verdict(m.name, d.status, "paired", ref, cur, delta,
                worse_change(m, d.detectable) if d.detectable is not None else None, None, len(block_effects), msg,
                m.scale.name)
    return with_interval(v, m, d, a)


def judge_invariant(label: str, m: Metric | str, reference: Sequence[float], current: Sequence[float],
                    bound: float, *, paired: bool, alpha: float = ALPHA,
                    reference_instances: Sequence[str] | None = None,
                    current_instances: Sequence[str] | None = None) -> Verdict:
    """Same-run invariant ``current >= bound x reference`` in ``m``'s good direction.

    ``paired``: windows i of both came from the same round (interleaved), so per-round ratios are judged;
    otherwise (separate engines) the engine instance is the unit: ``*_instances`` name the instance of each window
    (``RunResult.metadata["window_instance"]``), and fewer than two instances per arm is ``inconclusive``."""
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
        d = decide_bound(good * (cur - ref), bound, alpha=alpha)
        how = "paired rounds"
    else:
        d = decide_bound_unpaired(good * ref, good * cur, bound, alpha=alpha, reference_instances=reference_instances,
                                 current_instances=current_instances)
        n_ref = len(set(reference_instances)) if reference_instances is not None else 1
        n_cur = len(set(current_instances)) if current_instances is not None else 1
        how = f"separate engines, {n_ref} + {n_cur} instances"
    ratio = math.exp(good * (cur.mean() - ref.mean()))
    name = f"{m.name} ratio {label}".strip()
    head = f"{name}: {ratio:.3f}x (invariant >= {bound:g}x; reference {math.exp(ref.mean()):.4g}, current " \
           f"{math.exp(cur.mean()):.4g} {m.unit}, {how})"
    msg = head + (f": inconclusive: {d.reason}" if d.status == "inconclusive" else
                  ": invariant violated" if d.status == "regression" else ": holds")
    return Verdict(name, d.status, "bound", math.exp(ref.mean()), math.exp(cur.mean()), ratio - 1.0, None, None,
                   int(min(ref.size, cur.size)), msg, "log")

"""Null units: what two engines of one launch, alive together in one instance group, differ by.

A group of launches (the A/B of two builds, the transport group) starts every arm ``Group.replicas`` times per
instance group (``--perf-ab-replicas``, 2 by default). Its verdict's unit is still the instance group: the mean of the
candidate's replicas against the mean of the reference's, per block, averaged over the group's blocks. The replicas
of one arm are the same launch, so the differences among them have a true mean of 0: **null units**, measured beside
the verdict, in the same blocks, under the same host state.

Every null unit here is on the **pair scale**: the variance of one engine's mean against another's (``2 s^2``, with
``s^2`` one engine's variance over its blocks, offset included), which is what the A/A history always held (a null
A/B of one engine per build). With ``r`` replicas an arm gives ``r - 1`` of them per instance group, as Helmert
contrasts (replica ``k + 1`` against the mean of the first ``k``, scaled by ``sqrt(2k / (k + 1))``), which are
independent of one another and of the verdict's own contrast. The verdict's unit, ``mean(candidate replicas) -
mean(reference replicas)``, has variance ``s^2 (1/r_ref + 1/r_cand)``: the null units are pooled into it scaled by
half that (``design_factor``), with the host's A/A history (``store.null_history``), in ``judged_null``.

``recorded_units`` is what a run adds to the history: every arm's pair units, and for a null A/B (the same build on
both sides) the verdict's own units too, brought to the pair scale.

**A fresh runner** has no history: an A/B's row it cannot decide with its own 2-4 pairs is not a failure of the build
but of the runner's evidence, so while the host's history holds fewer than ``HISTORY_MIN`` units such a row is
``no-baseline`` (``building``), saying how many units it has and that every A/B adds its pairs; a regression or a pass
it could decide stands. Once the history holds them, an undecided row is ``inconclusive`` again (strict: red).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from engine_fixtures.judge.blocks import labelled_effects
from engine_fixtures.judge.decide import NullSample
from engine_fixtures.judge.verdicts import Verdict
from engine_fixtures.scenarios.group import Group

Windows = Mapping[str, Sequence[tuple[int, Mapping[str, float]]]]  # per member: (block, values)
# Null units of this host's A/A history before an undecided A/B row is the build's, not the runner's: with 3-5 units
# of one H100 host the A/B caught 9.3-10.0 % on req/s and 6.4-7.0 % on TPOT (docs/results/h100-issue44-2026-12-06b).
HISTORY_MIN = 4
Unit = tuple[int, float]  # (instance group, effect)


def _by_unit(labelled: Sequence[tuple[int, float]], block_unit: Sequence[int]) -> list[Unit]:
    by: dict[int, list[float]] = {}
    for b, e in labelled:
        by.setdefault(block_unit[b], []).append(e)
    return [(u, float(np.mean(v))) for u, v in by.items()]


def _side(windows: Windows, members: Sequence[str], name: str) -> tuple[list[float], list[int]]:
    pairs = [(w[name], b) for m in members for b, w in windows[m] if name in w]
    return [v for v, _ in pairs], [b for _, b in pairs]


def pair_units(group: Group, windows: Windows, block_unit: Sequence[int], name: str) -> list[Unit]:
    """This run's null units of metric ``name`` on the pair scale, one per arm, instance group and replica past
    the first (module docstring)."""
    out: list[Unit] = []
    for arm in group.arms:
        members = group.members_of(arm.name)
        for k in range(1, len(members)):
            ref, ref_b = _side(windows, members[:k], name)
            cand, cand_b = _side(windows, members[k:k + 1], name)
            scale = math.sqrt(2 * k / (k + 1))
            out += [(u, e * scale) for u, e in _by_unit(labelled_effects(name, ref, ref_b, cand, cand_b), block_unit)]
    return out


def design_factor(group: Group) -> float:
    """The variance of the verdict's unit over the pair scale's: ``(1/r + 1/r) / 2`` for ``r`` replicas a side."""
    return 1.0 / group.replicas


def judged_null(group: Group, history: NullSample | None, windows: Windows, block_unit: Sequence[int],
                name: str) -> NullSample | None:
    """The null units a verdict of ``group`` in ``name`` pools its variance with: this host's A/A history and this
    run's own pair units, brought to the verdict's scale; None where there are none."""
    own = [e for _, e in pair_units(group, windows, block_unit, name)]
    parts = [p for p in (history, NullSample.of(own, f"this run's {len(own)} same-build pair(s)") if own else None)
             if p is not None]
    if not parts:
        return None
    return NullSample(sum(p.sum_sq for p in parts) * design_factor(group), sum(p.units for p in parts),
                      " and ".join(p.source for p in parts))


def recorded_units(group: Group, windows: Windows, block_unit: Sequence[int], names: Sequence[str],
                   same_build: bool = False) -> dict[str, list[Unit]]:
    """Per metric, the pair-scale null units this run adds to the A/A history: every arm's replica pairs, and where
    ``same_build`` (a null A/B: one build on both sides) each contrast's own units brought to the pair scale."""
    lift = 1.0 / math.sqrt(design_factor(group))
    out = {}
    for n in names:
        units = pair_units(group, windows, block_unit, n)
        for c in group.contrasts if same_build else ():
            ref, ref_b = _side(windows, group.members_of(c.reference), n)
            cand, cand_b = _side(windows, group.members_of(c.candidate), n)
            units += [(u, e * lift) for u, e in _by_unit(labelled_effects(n, ref, ref_b, cand, cand_b), block_unit)]
        out[n] = units
    return out


def building(v: Verdict, history: NullSample | None) -> Verdict:
    """An A/B row ``v`` that its run could not decide while this host's A/A history (``history``) holds fewer than
    ``HISTORY_MIN`` units: ``no-baseline``, saying so (module docstring); any other row unchanged."""
    held = history.units if history is not None else 0
    if v.status != "inconclusive" or held >= HISTORY_MIN:
        return v
    return replace(v, status="no-baseline", message=(
        f"{v.message}; not a verdict yet: this runner's A/A history holds {held} of the {HISTORY_MIN} null units an "
        "A/B needs before an undecided row is the build's (every A/B adds its same-build pairs; "
        "`scripts/gpu/gpu_tier.sh null` adds a null A/B's)"))

"""Mirrored blocks over N members, and the per-block effect of one member against another (statistics only).

A block visits every member twice, in order and then reversed (``A B C C B A``): each member's mean position in
the block is the same, so a drift that is linear over the block (clocks, thermals, a filling cache) adds the same to
every member and cancels in every contrast. Consecutive blocks meet at a repeated member (``... B A | A B ...``),
which the runner serves in one visit. The per-block effect of ``candidate`` against ``reference`` is
``mean log(candidate) - mean log(reference)`` over that block's windows (linear metrics: the difference of the
means): the unit a paired contrast judges (``decide.decide_contrast``). Where members ran on separate engines
(a group of launches, ``scenarios.groups``), the unit is the instance group instead: ``unit_means`` averages the
block effects of each fresh group of engines, so the offset between two engine starts is inside the interval.

The one block order and the one effect computation of both tiers: live arms on one engine
(``scenarios.live_runs``), groups of engines (``scenarios.groups``: the A/B of two builds, transports, the A/B
study) and the CPU tier's rounds (``cpu_tier.driver``: a round is half a block, the forward or the reversed pass).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

import numpy as np

from engine_fixtures.judge.metrics import Metric, metric


def mirrored(members: Sequence[str]) -> list[str]:
    """One block: ``members`` in order, then reversed (each member twice)."""
    if not members:
        raise ValueError("a block needs at least one member")
    if len(set(members)) != len(members):
        raise ValueError(f"block members must be distinct, got {list(members)}")
    return [*members, *reversed(members)]


def visits(blocks: Sequence[Sequence[str]]) -> list[tuple[str, int]]:
    """Consecutive windows of one member across the blocks as ``(member, windows)`` visits, in order: the blocks
    ``A B B A`` and ``A B B A`` give ``A 1, B 2, A 2, B 2, A 1``."""
    flat = [m for block in blocks for m in block]
    return [(m, len(list(run))) for m, run in itertools.groupby(flat)]


def plan(order: Sequence[str] | Callable[[int], Sequence[str]], first_block: int,
         blocks: int) -> list[tuple[str, list[int]]]:
    """Visits for ``blocks`` more mirrored blocks of ``order`` (or of ``order(block)``, the members of each block):
    ``(member, the block index of each of its windows)``, consecutive windows of one member merged into one visit."""
    order_of = order if callable(order) else (lambda _b: order)
    labelled = [(m, b) for b in range(first_block, first_block + blocks) for m in mirrored(order_of(b))]
    out: list[tuple[str, list[int]]] = []
    i = 0
    for m, n in visits([[a for a, _ in labelled]]):
        out.append((m, [b for _, b in labelled[i:i + n]]))
        i += n
    return out


def rounds(members: Sequence[int], n: int) -> list[list[int]]:
    """``n`` rounds over ``members``: each mirrored block cut into its forward and its reversed pass (the CPU tier
    measures one window per member per round)."""
    block = mirrored(members)
    k = len(members)
    return [block[:k] if r % 2 == 0 else block[k:] for r in range(n)]


def unit_means(effects: Sequence[float | None], units: Sequence[object]) -> list[float]:
    """The mean block effect of each unit (an instance group of engines), in order of first appearance; blocks
    without a usable effect are left out, and so is a unit left with none."""
    if len(effects) != len(units):
        raise ValueError("every block effect needs its unit")
    by: dict[object, list[float]] = {}
    for u, e in zip(units, effects, strict=True):
        if e is not None and math.isfinite(e):
            by.setdefault(u, []).append(e)
    return [float(np.mean(v)) for v in by.values()]


def block_effect(m: Metric | str, reference: Sequence[float], candidate: Sequence[float]) -> float | None:
    """One block's candidate-vs-reference effect in ``m`` (judged scale); None when either side has no window or a
    log-scale value is not positive."""
    m = m if isinstance(m, Metric) else metric(m)
    ref = np.asarray(reference, dtype=float)
    cand = np.asarray(candidate, dtype=float)
    if not ref.size or not cand.size:
        return None
    if m.scale.name == "log":
        if (ref <= 0).any() or (cand <= 0).any():
            return None
        return float(np.log(cand).mean() - np.log(ref).mean())
    return float(cand.mean() - ref.mean())


def effects_by_block(m: Metric | str, reference: Sequence[float], reference_blocks: Sequence[int],
                     candidate: Sequence[float], candidate_blocks: Sequence[int]) -> list[float]:
    """Per-block effects of two members' windows, each window labelled with its block; blocks where either member
    has no usable window are left out."""
    return [e for _, e in labelled_effects(m, reference, reference_blocks, candidate, candidate_blocks)]


def labelled_effects(m: Metric | str, reference: Sequence[float], reference_blocks: Sequence[int],
                     candidate: Sequence[float], candidate_blocks: Sequence[int]) -> list[tuple[int, float]]:
    """``effects_by_block`` with each effect's block index (to group blocks into units)."""
    if len(reference) != len(reference_blocks) or len(candidate) != len(candidate_blocks):
        raise ValueError("every window needs its block index")
    out = []
    for b in sorted(set(reference_blocks) & set(candidate_blocks)):
        ref = [v for v, k in zip(reference, reference_blocks, strict=True) if k == b]
        cand = [v for v, k in zip(candidate, candidate_blocks, strict=True) if k == b]
        e = block_effect(m, ref, cand)
        if e is not None and math.isfinite(e):
            out.append((b, e))
    return out

"""Mirrored blocks over N members, and the per-block effect of one member against another (statistics only).

A block visits every member twice, in order and then reversed (``A B C C B A``): each member's mean position in
the block is the same, so a drift that is linear over the block (clocks, thermals, a filling cache) adds the same to
every member and cancels in every contrast. Consecutive blocks meet at a repeated member (``... B A | A B ...``),
which the runner serves in one visit. The per-block effect of ``candidate`` against ``reference`` is
``mean log(candidate) - mean log(reference)`` over that block's windows (linear metrics: the difference of the
means): the unit a paired contrast judges (``decide.decide_contrast``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

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
    if len(reference) != len(reference_blocks) or len(candidate) != len(candidate_blocks):
        raise ValueError("every window needs its block index")
    out = []
    for b in sorted(set(reference_blocks) & set(candidate_blocks)):
        ref = [v for v, k in zip(reference, reference_blocks, strict=True) if k == b]
        cand = [v for v, k in zip(candidate, candidate_blocks, strict=True) if k == b]
        e = block_effect(m, ref, cand)
        if e is not None and math.isfinite(e):
            out.append(e)
    return out

"""Mirrored blocks over N members, and the per-block effect of one member against another (statistics only).

A block visits every member twice, in order and then reversed (``A B C C B A``): each member's mean position in
the block is the same, so a drift that is linear over the block (clocks, thermals, a filling cache) adds the same to
every member and cancels in every contrast. Consecutive blocks meet at a repeated member (``... B A | A B ...``),
which the runner serves in one visit. The per-block effect of ``candidate`` against ``reference`` is
``mean log(candidate) - mean log(reference)`` over that block's windows (linear metrics: the difference of the
means): the unit a paired contrast judges (``decide.decide_contrast``). Where members ran on separate engines
(a group of launches, ``scenarios.group``), the unit is the instance group instead: ``unit_means`` averages the
block effects of each fresh group of engines, so the offset between two engine starts is inside the interval.

Within a block, ``near_order`` puts the two members of each contrast next to each other where it can: the host's
noise has a memory of seconds, so neighbours difference more of it away.

The one block order and the one effect computation of both tiers: a ``Group``'s blocks (``scenarios.blocks_run``:
live arms on one engine, launches of their own such as the A/B of two builds and the transports, the A/B study) and
the CPU tier's rounds (``cpu_tier.driver``: a round is half a block, the forward or the reversed pass).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from engine_fixtures.judge.metrics import Metric, metric


def mirrored(members: Sequence[str]) -> list[str]:
    """One block: ``members`` in order, then reversed (each member twice); a block of one member is one window
    (mirroring one member cancels nothing: a launch measured alone looks every ``--perf-repeats`` windows)."""
    if not members:
        raise ValueError("a block needs at least one member")
    if len(set(members)) != len(members):
        raise ValueError(f"block members must be distinct, got {list(members)}")
    return list(members) if len(members) == 1 else [*members, *reversed(members)]


NEAR_ORDER_MAX = 8  # members searched exhaustively (8! orders); beyond, the given order is kept


def near_order(members: Sequence[str], pairs: Iterable[tuple[str, str]]) -> list[str]:
    """``members`` in the order that serves the two members of each pair (a contrast's arms) closest together: the
    smallest summed distance between paired members, the first such order among the permutations of ``members``
    (ties keep the given order, so a shuffled ``members`` still decides who goes first). Members in no pair go
    last, in the given order; pairs naming a member not in ``members`` are ignored. Beyond ``NEAR_ORDER_MAX``
    paired members the given order is kept.

    Why: the host's noise has a memory of seconds to tens of seconds (the H200's per-window TTFT residuals
    correlate +0.72 at 3 s, +0.34 at 8-15 s and +0.2 at 25-40 s), so two arms visited next to each other share
    more of it. In the 2026-12-03b nightly, pairs of neighbours had a per-block sd of 8.2 % on TTFT and 5.7 % on
    req/s (root-mean-square over six pairs), pairs two or three visits apart 9.9 % and 7.7 %; the contrast that
    stayed undecided was two and three apart in its two runs."""
    present = set(members)
    wanted = [(a, b) for a, b in pairs if a in present and b in present and a != b]
    paired = [m for m in members if any(m in p for p in wanted)]
    rest = [m for m in members if m not in paired]
    if len(paired) > NEAR_ORDER_MAX:
        return [*paired, *rest]
    best, best_cost = paired, None
    for perm in itertools.permutations(paired):
        at = {m: i for i, m in enumerate(perm)}
        cost = sum(abs(at[a] - at[b]) for a, b in wanted)
        if best_cost is None or cost < best_cost:
            best, best_cost = list(perm), cost
    return [*best, *rest]


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
    block = [*members, *reversed(members)]
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


def ratios_by_block(m: Metric | str, reference: Sequence[float], reference_blocks: Sequence[int],
                    candidate: Sequence[float], candidate_blocks: Sequence[int]) -> tuple[float, ...]:
    """Per block both sides measured, the candidate over the reference as a ratio (a log-scale metric's ``rel.*``
    sample: the arm against the control in the same block, which travels between runs and hosts)."""
    if (m if isinstance(m, Metric) else metric(m)).scale.name != "log":
        raise ValueError(f"a ratio needs a log-scale metric, not {m}")
    return tuple(math.exp(e) for _, e in labelled_effects(m, reference, reference_blocks, candidate, candidate_blocks))

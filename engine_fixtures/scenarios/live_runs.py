"""Measure a ``LiveGroup`` on one engine until its contrasts are decided: mirrored blocks of proved visits.

``measure_live(group, budget, visit, undecided, rng)``: the arms in a random order, rearranged so that the two arms of
each contrast (each open one, after a look) are neighbours where they can be (``judge.blocks.near_order``: the host's
noise has a memory of seconds), each block that order and its reverse (``judge.blocks.mirrored``; an arm declared a
measured row of ``blocks`` only in the first that many), consecutive windows of one arm served by one visit
(``judge.blocks.visits``).
``visit(arm, n)`` switches the engine to ``arm`` (the quota, then the plugin's live arm, proved by every engine
process), runs one load segment of its warmup and ``n`` windows, checks that the segment's proof counters say the arm
really served it, and returns the windows' values. Blocks are added, ``budget.step`` at a time, while
``undecided(windows, alpha)`` names an open contrast cell, up to ``budget.maximum`` blocks; after a look, an arm that
no open contrast needs is no longer served (``LiveGroup.order``): once regression 1 is flagged, SGLang's own copy stops
costing blocks.

``arm_windows`` are ``(block, values)`` per arm, in the order measured; ``contrast_verdicts`` judges one contrast
from them (per-block effects, ``judge.paired.judge_contrast``).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from engine_fixtures.judge.blocks import effects_by_block, near_order, plan
from engine_fixtures.judge.metrics import is_known, metric
from engine_fixtures.judge.paired import judge_contrast
from engine_fixtures.judge.rows import as_diagnostic
from engine_fixtures.judge.sequential import Budget, Progress, measure_until_decided
from engine_fixtures.judge.verdicts import Verdict
from engine_fixtures.scenarios.live import REPORTED_WHY, Arm, Contrast, LiveGroup

Window = tuple[int, dict[str, float]]  # (block index, the window's values)
ArmWindows = Mapping[str, Sequence[Window]]
Visit = Callable[[Arm, int], list[dict[str, float]]]
VISIT_KEY = "window_visit"  # RunResult.metadata: [visit number, window number in that visit] of each window


@dataclass(frozen=True)
class LiveRun:
    order: tuple[tuple[str, ...], ...]  # the arms of each block, in the order served (then reversed)
    windows: Mapping[str, tuple[Window, ...]]
    visits: Mapping[str, tuple[tuple[int, int], ...]]  # per arm window: (visit number, window number in the visit)
    progress: Progress
    alpha_per_look: float
    budget_blocks: int

    @property
    def blocks(self) -> int:
        return self.progress.measured


def measure_live(group: LiveGroup, budget: Budget, visit: Visit,
                 undecided: Callable[[ArmWindows, float], Sequence[str]], rng: random.Random | None = None) -> LiveRun:
    order = [a.name for a in group.arms]
    (rng or random.Random()).shuffle(order)  # no arm always goes first
    windows: dict[str, list[Window]] = {a.name: [] for a in group.arms}
    seen: dict[str, list[tuple[int, int]]] = {a.name: [] for a in group.arms}
    done = [0, 0]  # blocks, visits
    looked: list[set[str]] = []  # the contrasts open at each look: an arm none of them needs is not served

    served: dict[int, list[str]] = {}

    def serve(block: int) -> list[str]:
        open_labels = looked[-1] if looked else None
        served[block] = near_order(group.order(order, block, open_labels),
                                   [(c.reference, c.candidate) for c in group.contrasts
                                    if open_labels is None or c.label in open_labels])
        return served[block]

    def measure(n: int) -> None:
        for arm, blocks in plan(serve, done[0], n):
            values = visit(group.arm(arm), len(blocks))
            windows[arm].extend(zip(blocks, values, strict=True))
            seen[arm].extend((done[1], i) for i in range(len(blocks)))
            done[1] += 1
        done[0] += n

    def look(alpha: float) -> Sequence[str]:
        cells = list(undecided(windows, alpha))
        looked.append({contrast_of(cell) for cell in cells})
        return cells

    progress = measure_until_decided(budget, measure, look)
    return LiveRun(tuple(tuple(served[b]) for b in sorted(served)), {k: tuple(v) for k, v in windows.items()},
                   {k: tuple(v) for k, v in seen.items()}, progress, budget.alpha_per_look(), budget.maximum)


def metric_blocks(windows: Sequence[Window], name: str) -> tuple[list[float], list[int]]:
    pairs = [(w[name], b) for b, w in windows if name in w]
    return [v for v, _ in pairs], [b for _, b in pairs]


def contrast_verdicts(group: LiveGroup, contrast: Contrast, windows: ArmWindows, *, budget: int, alpha: float,
                      floor: float | None = None) -> list[Verdict]:
    """One verdict row per metric family of ``contrast`` that both arms measured (GPU utilisation only where NVML
    saw the GPU, a role's CPU only where the role ran)."""
    ref_w, cand_w = windows[contrast.reference], windows[contrast.candidate]
    names = [n for n in group.families(contrast) if is_known(n) and metric(n).direction != "none"
             and any(n in w for _, w in ref_w) and any(n in w for _, w in cand_w)]
    label = f"{contrast.candidate} vs {contrast.reference}"
    out = []
    for name in names:
        ref, ref_b = metric_blocks(ref_w, name)
        cand, cand_b = metric_blocks(cand_w, name)
        effects = effects_by_block(name, ref, ref_b, cand, cand_b)
        v = judge_contrast(label, name, ref, cand, effects, bound=contrast.bound, budget=budget, alpha=alpha,
                           floor=floor, family=len([n for n in names if n not in contrast.report]))
        out.append(as_diagnostic(v, f"reported, never gating: {REPORTED_WHY.get(name, contrast.why)}")
                   if name in contrast.report else v)
    return out


CELL = "{label}: {metric}"  # an open contrast cell, as open_cells names it


def contrast_of(cell: str) -> str:
    """The contrast label of a cell ``open_cells`` named (metric names hold no ': ')."""
    return cell.rpartition(": ")[0]


def open_cells(group: LiveGroup, windows: ArmWindows, *, budget: int, alpha: float,
               floor: float | None = None) -> list[str]:
    """The contrast cells still undecided (what keeps the runner measuring). A contrast with a violated family is
    decided (it fails whatever its other families say), so its undecided cells do not keep the runner going."""
    out = []
    for c in group.contrasts:
        rows = contrast_verdicts(group, c, windows, budget=budget, alpha=alpha, floor=floor)
        if not any(v.status == "regression" for v in rows):
            out += [CELL.format(label=c.label, metric=v.metric) for v in rows if v.status == "inconclusive"]
    return out

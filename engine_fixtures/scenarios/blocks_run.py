"""The one measuring loop of a ``Group``, its verdict builder and its stopping rule (no engine, no pytest).

``measure(group, budget, visit, undecided, start=, blocks_per_unit=, rng=)``: the arms in a random order (again at
each ``start``), rearranged so that the two arms of each contrast (each open one, after a look) are neighbours where
they can be (``judge.blocks.near_order``: the host's noise has a memory of seconds), each block that order and its
reverse (``judge.blocks.mirrored``; a measured row of ``blocks`` only in the first that many), consecutive windows of
one arm served by one visit (``judge.blocks.plan``). The budget counts units: a block, for arms of one engine; a fresh
instance group of ``blocks_per_unit`` blocks, started by ``start(unit)``, for separate launches. Units are added,
``budget.step`` at a time, while ``undecided(windows, block_unit, alpha)`` names an open cell, up to
``budget.maximum``; after a look, an arm that no open contrast needs is no longer served (``Group.order``): once
regression 1 is flagged, SGLang's own copy stops costing blocks.

``contrast_verdicts`` judges one contrast from the windows: per-block effects, averaged per unit
(``judge.blocks.unit_means``), by ``judge.paired.judge_contrast``; ``open_cells`` is the stopping rule built on it.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine_fixtures.judge import sequential
from engine_fixtures.judge.blocks import labelled_effects, near_order, plan, unit_means
from engine_fixtures.judge.decide import NullSample
from engine_fixtures.judge.families import REPORTED_WHY
from engine_fixtures.judge.gating import gating
from engine_fixtures.judge.metrics import is_known, metric
from engine_fixtures.judge.paired import judge_contrast
from engine_fixtures.judge.rows import as_diagnostic
from engine_fixtures.judge.sequential import Budget, Progress, measure_until_decided
from engine_fixtures.judge.verdicts import Verdict
from engine_fixtures.scenarios.group import Contrast, Group
from engine_fixtures.scenarios.nulls import building, judged_null

Window = tuple[int, dict[str, float]]  # (block index, the window's values)
ArmWindows = Mapping[str, Sequence[Window]]
Visit = Callable[[str, int, int], list[dict[str, float]]]  # (member, windows, unit) -> the windows' values
Undecided = Callable[[ArmWindows, Sequence[int], float], Sequence[str]]
NullFor = Callable[[str, str], NullSample | None]  # (contrast label, metric) -> this host's null units, if any
VISIT_KEY = "window_visit"  # RunResult.metadata: [visit number, window number in that visit] of each window


@dataclass(frozen=True)
class GroupRun:
    order: tuple[tuple[str, ...], ...]  # the members of each block, in the order served (then reversed)
    windows: Mapping[str, tuple[Window, ...]]  # per member (an arm, or one replica of it: Group.members)
    visits: Mapping[str, tuple[tuple[int, int], ...]]  # per member window: (visit number, window number in the visit)
    block_unit: tuple[int, ...]  # the unit of each block: the block itself, or its instance group
    progress: Progress
    alpha_per_look: float
    budget_units: int

    @property
    def blocks(self) -> int:
        return len(self.order)

    @property
    def units(self) -> int:
        return len(set(self.block_unit))


def measure(group: Group, budget: Budget, visit: Visit, undecided: Undecided, *,
            start: Callable[[int], None] | None = None, blocks_per_unit: int = 1,
            rng: random.Random | None = None) -> GroupRun:
    rng = rng or random.Random()
    order = list(group.members)
    rng.shuffle(order)  # no arm always goes first
    windows: dict[str, list[Window]] = {m: [] for m in order}
    seen: dict[str, list[tuple[int, int]]] = {m: [] for m in order}
    served: list[tuple[str, ...]] = []
    block_unit: list[int] = []
    looked: list[set[str]] = []  # the contrasts open at each look: an arm none of them needs is not served
    visits = [0]

    def serve(block: int) -> list[str]:
        open_labels = looked[-1] if looked else None
        names = near_order(group.order(order, block, open_labels),
                           [p for c in group.contrasts if open_labels is None or c.label in open_labels
                            for p in group.member_pairs(c.reference, c.candidate)])
        served.append(tuple(names))
        return names

    def serve_blocks(n: int, units: list[int]) -> None:
        """``n`` more blocks, consecutive windows of one arm in one visit (``... B A | A B ...``: A once)."""
        for arm, blocks in plan(serve, len(block_unit), n):
            values = visit(arm, len(blocks), units[blocks[0] - len(block_unit)])
            windows[arm].extend(zip(blocks, values, strict=True))
            seen[arm].extend((visits[0], i) for i in range(len(blocks)))
            visits[0] += 1
        block_unit.extend(units)

    def measure_units(n: int) -> None:
        if start is None:  # one engine: each block is a unit
            serve_blocks(n, list(range(len(block_unit), len(block_unit) + n)))
            return
        for _ in range(n):  # separate launches: a fresh instance group of blocks_per_unit blocks per unit
            unit = len(set(block_unit))
            rng.shuffle(order)
            start(unit)
            serve_blocks(blocks_per_unit, [unit] * blocks_per_unit)

    def look(alpha: float) -> Sequence[str]:
        cells = list(undecided(windows, block_unit, alpha))
        looked.append({sequential.label_of(cell) for cell in cells})
        return cells

    progress = measure_until_decided(budget, measure_units, look)
    return GroupRun(tuple(served), {k: tuple(v) for k, v in windows.items()}, {k: tuple(v) for k, v in seen.items()},
                    tuple(block_unit), progress, budget.alpha_per_look(), budget.maximum)


def arm_windows(group: Group, windows: ArmWindows, arm: str, *columns: Mapping[str, Sequence[Any]]
                ) -> tuple[tuple[Window, ...], ...]:
    """Arm ``arm``'s windows over its members (``Group.members_of``: its replicas, or itself), in block order (within
    a block, member by member), and each of ``columns`` (per member, one entry per window: the engine that served
    it, its requests, its visit) in that same order."""
    members = group.members_of(arm)
    keys = sorted(((b, k, i) for k, m in enumerate(members) for i, (b, _) in enumerate(windows[m])))
    return tuple(tuple(col[members[k]][i] for _, k, i in keys) for col in (windows, *columns))


def metric_blocks(windows: Sequence[Window], name: str) -> tuple[list[float], list[int]]:
    pairs = [(w[name], b) for b, w in windows if name in w]
    return [v for v, _ in pairs], [b for _, b in pairs]


def unit_effects(name: str, reference: Sequence[Window], candidate: Sequence[Window],
                 block_unit: Sequence[int]) -> tuple[list[float], list[float]]:
    """``(per block, per unit)`` effects of candidate vs reference in ``name``."""
    ref, ref_b = metric_blocks(reference, name)
    cand, cand_b = metric_blocks(candidate, name)
    labelled = labelled_effects(name, ref, ref_b, cand, cand_b)
    return [e for _, e in labelled], unit_means([e for _, e in labelled], [block_unit[b] for b, _ in labelled])


@dataclass(frozen=True)
class Judging:
    """What a contrast's verdicts are judged with besides its windows: the look's alpha, the budget in units, the
    floor, and for separate launches the ceiling (``--perf-ab-detect``), this host's A/A history and, for the A/B of
    two builds, the launch's axes its gating metrics are read from."""

    alpha: float
    budget: int
    floor: float | None = None
    detect: float | None = None
    null_for: NullFor = lambda _c, _m: None
    ab_axes: Mapping[str, str] | None = None
    final: bool = False  # the verdicts a run ends on (a fresh runner's undecided A/B rows: ``nulls.building``)


def contrast_verdicts(group: Group, contrast: Contrast, windows: ArmWindows, block_unit: Sequence[int],
                      judging: Judging) -> list[Verdict]:
    """One verdict row per metric family of ``contrast`` that both arms measured (GPU utilisation only where NVML
    saw the GPU, a role's CPU only where the role ran); an A/B's over its launch's gating metrics."""
    (ref_w,) = arm_windows(group, windows, contrast.reference)
    (cand_w,) = arm_windows(group, windows, contrast.candidate)
    if group.ab:
        wanted: Sequence[str] = gating({k for ws in windows.values() for _, w in ws for k in w
                                        if metric(k).judged}, judging.ab_axes or {})
    else:
        wanted = group.families(contrast)
    names = [n for n in wanted if is_known(n) and metric(n).direction != "none"
             and any(n in w for _, w in ref_w) and any(n in w for _, w in cand_w)]
    label = f"{contrast.candidate} vs {contrast.reference}"
    family = len([n for n in names if n not in contrast.report])
    out = []
    for name in names:
        per_block, per_unit = unit_effects(name, ref_w, cand_w, block_unit)
        history = judging.null_for(contrast.label, name) if group.separate else None  # the A/A history, read once
        null = judged_null(group, history, windows, block_unit, name) if group.separate else None
        units = ("engine blocks" if not group.separate else
                 "groups" if len(per_unit) >= 2 or null is not None else "pair blocks")
        v = judge_contrast(label, name, metric_blocks(ref_w, name)[0], metric_blocks(cand_w, name)[0],
                           per_block if units != "groups" else per_unit, units=units, bound=contrast.bound_of(name),
                           budget=judging.budget, alpha=judging.alpha, floor=judging.floor, family=family,
                           detect=judging.detect, null=null, arm=judging.ab_axes if group.ab else None)
        if judging.final and group.separate:
            v = building(v, history)
        out.append(as_diagnostic(v, f"reported, never gating: {REPORTED_WHY.get(name, contrast.why)}")
                   if name in contrast.report and v.is_verdict else v)
    return out


def open_cells(group: Group, windows: ArmWindows, block_unit: Sequence[int], judging: Judging) -> list[str]:
    """The contrast cells still undecided (``judge.sequential.open_cells``, the one stopping rule)."""
    return sequential.open_cells(contrasts={c.label: contrast_verdicts(group, c, windows, block_unit, judging)
                                            for c in group.contrasts})

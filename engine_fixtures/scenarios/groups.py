"""Groups of engines for what cannot switch live: members launched separately, alive at once on one GPU, measured in
mirrored blocks, with contrasts between members.

A ``LiveGroup`` (``scenarios.live``) is the one-engine case: its arms switch live on one instance, so the offset
between two engine starts cancels. What a live switch cannot change is a launch: the transport (``cpu`` vs
``cuda_ipc``) and the build (an A/B of a candidate SGLang against a reference, ``--perf-reference``). An
``EngineGroup`` declares such members (``Member``: a launch as an ``EngineScenario`` and, for an A/B, its build) and
the ``Contrast`` between two of them, read as for live arms: ``candidate >= bound x reference``.

``measure_group(names, start, visit, budget, blocks_per_instance, undecided)``: fresh instance groups, each started by
``start(g)`` (every member once, one at a time, equal KV pools: ``engine.group``), each measured in
``blocks_per_instance`` mirrored blocks (``judge.blocks.plan``, a new random member order per instance group), more
instance groups while ``undecided`` names an open cell, up to the budget. The unit of every verdict is the instance
group: ``group_verdicts`` averages each group's block effects (``judge.blocks.unit_means``) and judges them with this
host's A/A history pooled into the variance where one exists (``judge.paired.judge_ab``). With one instance group and
no history, the blocks are the units and the verdict says that the instance offset is not in its interval.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from engine_fixtures.engine.build import EngineBuild
from engine_fixtures.errors import ConfigError
from engine_fixtures.judge.blocks import labelled_effects, plan, unit_means
from engine_fixtures.judge.decide import NullSample
from engine_fixtures.judge.metrics import is_known, metric
from engine_fixtures.judge.paired import judge_ab
from engine_fixtures.judge.rows import as_diagnostic
from engine_fixtures.judge.sequential import Budget, Progress, measure_until_decided
from engine_fixtures.judge.verdicts import Verdict
from engine_fixtures.scenarios.engine import EngineScenario
from engine_fixtures.scenarios.live import REPORTED_WHY, ROLE_FAMILY, Contrast

Window = tuple[int, dict[str, float]]  # (block index, the window's values)
GroupWindows = Mapping[str, Sequence[Window]]
Start = Callable[[int], None]  # start instance group g (the previous one stopped)
Visit = Callable[[int, str, int], list[dict[str, float]]]  # (instance group, member, windows) -> values
NullFor = Callable[[str], NullSample | None]  # metric -> this host's null units, if any


@dataclass(frozen=True)
class Member:
    name: str
    engine: EngineScenario
    build: EngineBuild | None = None  # None: the build under test (--perf-candidate)

    def __post_init__(self) -> None:
        if not self.name or "/" in self.name:
            raise ConfigError(f"member name {self.name!r}: a non-empty name without '/'")


@dataclass(frozen=True)
class EngineGroup:
    """Members alive at once on one GPU and the contrasts between them. ``gated_by_scenario``: judge each contrast
    over its launch's gating metrics (``judge.gating``: the A/B of two builds) instead of its declared families."""

    id: str
    members: tuple[Member, ...]
    contrasts: tuple[Contrast, ...] = field(default=())
    gated_by_scenario: bool = False

    def __post_init__(self) -> None:
        names = [m.name for m in self.members]
        if len(names) < 2 or len(set(names)) != len(names):
            raise ConfigError(f"engine group {self.id}: needs two or more members with distinct names, got {names}")
        loads = {(m.engine.concurrency, m.engine.image_px, m.engine.output_tokens) for m in self.members}
        if len(loads) > 1:
            raise ConfigError(f"engine group {self.id}: members are compared under one load; they declare "
                              f"(concurrency, image px, output tokens) {sorted(loads)}")
        for c in self.contrasts:
            for who in (c.reference, c.candidate):
                if who not in names:
                    raise ConfigError(f"engine group {self.id}: contrast {c.label!r} names member {who!r}; members "
                                      f"are {', '.join(names)}")

    def member(self, name: str) -> Member:
        for m in self.members:
            if m.name == name:
                return m
        raise ConfigError(f"engine group {self.id} has no member {name!r}: it has "
                          f"{', '.join(m.name for m in self.members)}")

    def contrast(self, label: str) -> Contrast:
        for c in self.contrasts:
            if c.label == label:
                return c
        raise ConfigError(f"engine group {self.id} has no contrast {label!r}")

    def families(self, contrast: Contrast) -> tuple[str, ...]:
        """The contrast's metrics, ``cpu_s_per_request.<role>`` resolved to the roles its two launches differ in
        (the copy runs in the tokenizer manager, the IPC handles open in the scheduler, a build changes either)."""
        ref, cand = self.member(contrast.reference).engine, self.member(contrast.candidate).engine
        roles: list[str] = []
        if (ref.transport, ref.copy) != (cand.transport, cand.copy):
            roles.append("http_server")
        if (ref.transport, ref.ipc_cache) != (cand.transport, cand.ipc_cache):
            roles.append("scheduler")
        if self.member(contrast.reference).build != self.member(contrast.candidate).build:
            roles += [r for r in ("http_server", "scheduler") if r not in roles]
        out: list[str] = []
        for m in contrast.metrics:
            names = [f"cpu_s_per_request.{r}" for r in roles] if m == ROLE_FAMILY else [m]
            out += [n for n in names if n not in out]
        return tuple(out)


def ab_group(scenario: EngineScenario, reference: EngineBuild, candidate: EngineBuild,
             metrics: Sequence[str]) -> EngineGroup:
    """The A/B of two builds of one launch (``--perf-reference``) as a group of two members."""
    return EngineGroup(f"ab/{scenario.id}", (Member("reference", scenario, reference),
                                             Member("candidate", scenario, candidate)),
                       (Contrast("candidate vs reference", "reference", "candidate", 1.0, tuple(metrics),
                                 why="the A/B: the candidate build is no slower than the reference"),),
                       gated_by_scenario=True)


@dataclass(frozen=True)
class GroupRun:
    orders: tuple[tuple[str, ...], ...]  # the member order of each instance group's blocks (then reversed)
    windows: Mapping[str, tuple[Window, ...]]
    block_unit: tuple[int, ...]  # the instance group of each block
    progress: Progress
    alpha_per_look: float
    budget_units: int

    @property
    def instances(self) -> int:
        return len(set(self.block_unit))


def measure_group(names: Sequence[str], start: Start, visit: Visit, budget: Budget, blocks_per_instance: int,
                  undecided: Callable[[GroupWindows, Sequence[int], float], Sequence[str]],
                  rng: random.Random | None = None) -> GroupRun:
    """Instance groups (the budget's units) of ``blocks_per_instance`` mirrored blocks each, until decided."""
    if blocks_per_instance < 1:
        raise ConfigError(f"blocks per instance group must be >= 1, got {blocks_per_instance}")
    rng = rng or random.Random()
    windows: dict[str, list[Window]] = {n: [] for n in names}
    block_unit: list[int] = []
    orders: list[tuple[str, ...]] = []

    def measure(n: int) -> None:
        for _ in range(n):
            g = len(orders)
            order = list(names)
            rng.shuffle(order)  # no member always goes first
            orders.append(tuple(order))
            start(g)
            for who, blocks in plan(order, len(block_unit), blocks_per_instance):
                windows[who].extend(zip(blocks, visit(g, who, len(blocks)), strict=True))
            block_unit.extend([g] * blocks_per_instance)

    progress = measure_until_decided(budget, measure, lambda a: undecided(windows, block_unit, a))
    return GroupRun(tuple(orders), {k: tuple(v) for k, v in windows.items()}, tuple(block_unit), progress,
                    budget.alpha_per_look(), budget.maximum)


def _values(windows: Sequence[Window], name: str) -> tuple[list[float], list[int]]:
    pairs = [(w[name], b) for b, w in windows if name in w]
    return [v for v, _ in pairs], [b for _, b in pairs]


def unit_effects(name: str, reference: Sequence[Window], candidate: Sequence[Window],
                 block_unit: Sequence[int]) -> tuple[list[float], list[float]]:
    """``(per block, per instance group)`` effects of candidate vs reference in ``name``."""
    ref, ref_b = _values(reference, name)
    cand, cand_b = _values(candidate, name)
    labelled = labelled_effects(name, ref, ref_b, cand, cand_b)
    return [e for _, e in labelled], unit_means([e for _, e in labelled], [block_unit[b] for b, _ in labelled])


def group_verdicts(group: EngineGroup, contrast: Contrast, windows: GroupWindows, block_unit: Sequence[int], *,
                   budget: int, alpha: float, floor: float | None = None, detect: float | None = None,
                   null_for: NullFor = lambda _m: None, arm: Mapping[str, str] | None = None,
                   names: Sequence[str] | None = None) -> list[Verdict]:
    """One verdict row per metric of ``contrast`` that both members measured (``names``: those metrics instead)."""
    ref_w, cand_w = windows[contrast.reference], windows[contrast.candidate]
    wanted = names if names is not None else group.families(contrast)
    names = [n for n in wanted if is_known(n) and metric(n).direction != "none"
             and any(n in w for _, w in ref_w) and any(n in w for _, w in cand_w)]
    label = f"{contrast.candidate} vs {contrast.reference}"
    family = len([n for n in names if n not in contrast.report])
    out = []
    for name in names:
        per_block, per_unit = unit_effects(name, ref_w, cand_w, block_unit)
        null = null_for(name)
        units = "groups" if len(per_unit) >= 2 or null is not None else "blocks"
        v = judge_ab(name, _values(ref_w, name)[0], _values(cand_w, name)[0],
                     per_unit if units == "groups" else per_block, budget=budget, alpha=alpha, floor=floor,
                     detect=detect, family=family, arm=arm, units=units, null=null, bound=contrast.bound,
                     label=label)
        out.append(as_diagnostic(v, f"reported, never gating: {REPORTED_WHY.get(name, contrast.why)}")
                   if name in contrast.report and v.is_verdict else v)
    return out

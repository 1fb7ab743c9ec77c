"""A group of launches and this host's A/A history (``store.null_history``): the shape each arm's null units are
kept under, what a verdict reads from it, and what a run adds to it (``scenarios.nulls`` makes the units).

A shape is the load, the quota and, for an arm switched live on its launch (``Arm.switches``: the A/B serving the
arms a user runs), that arm's live axes: two engines of one build differ by their own offsets on SGLang's own copy
under a quota and by others on the buffer copy without one, so each arm pools only its own kind. With the stage
(``--perf-ab-stage on``) the shape is its own too: an offset measured with the idle members beside the measured one
is not one measured with them parked.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from engine_fixtures.engine.spec import EngineSpec
from engine_fixtures.judge.decide import NullSample
from engine_fixtures.judge.metrics import metric
from engine_fixtures.scenarios.blocks_run import GroupRun
from engine_fixtures.scenarios.engine import EngineScenario
from engine_fixtures.scenarios.group import AB_CANDIDATE, AB_REFERENCE, Group
from engine_fixtures.scenarios.nulls import recorded_units
from engine_fixtures.store.null_history import NullHistory, null_entry, shape_key

Cores = Callable[[str], "float | None"]  # arm name -> the CPU quota it is served under


def shape_of(group: Group, arm: str, spec: EngineSpec, cores: float | None, staged: bool) -> str:
    """The A/A history's shape of ``arm`` of a group of launches (module docstring)."""
    a = group.arm(arm)
    shape = shape_key(EngineScenario.key(spec, group.scenario_of(a)), cores)
    if a.switches:
        shape += f"/arm={a.live().label}"
    return shape + "/stage=on" if staged else shape


def shapes(group: Group, specs: Mapping[str, EngineSpec], cores: Cores, staged: bool) -> dict[str, str]:
    """Per contrast label, the shape its verdict reads (its reference arm's: both arms share it)."""
    return {c.label: shape_of(group, c.reference, specs[c.reference], cores(c.reference), staged)
            for c in group.contrasts}


def null_reader(history: NullHistory, by_label: Mapping[str, str], blocks: int, window_s: float
                ) -> Callable[[str, str], NullSample | None]:
    """``(contrast label, metric) -> this host's null units`` for a verdict (``blocks_run.Judging.null_for``)."""
    return lambda label, name: history.sample(by_label[label], name, blocks, window_s) if label in by_label else None


def same_build(group: Group) -> bool:
    """An A/B with the same build on both sides (a null A/B)."""
    builds = {group.side(a.name): a.build for a in group.arms}
    return group.ab and builds.get(AB_REFERENCE) == builds.get(AB_CANDIDATE)


def record(group: Group, run: GroupRun, history: NullHistory, specs: Mapping[str, EngineSpec], cores: Cores,
           staged: bool, history_id: str, blocks: int, window_s: float, aside: bool, boot_s: float
           ) -> tuple[str, ...]:
    """Add this run's null units to this host's A/A history, per shape: every arm's replica pairs and, for a null
    A/B, each contrast's own units (``nulls.recorded_units``); ``aside``: the fresh host's first instance group is
    kept aside (``NullHistory.warmup_unit``). One finding per shape written."""
    names = sorted({k for ws in run.windows.values() for _, w in ws for k in w
                    if metric(k).judged and metric(k).direction != "none"})
    by_shape: dict[str, list[str]] = {}
    for a in group.arms:
        by_shape.setdefault(shape_of(group, a.name, specs[a.name], cores(a.name), staged), []).append(a.name)
    out = []
    for shape, arms in by_shape.items():
        part = replace(group, arms=tuple(group.arm(n) for n in arms),
                       contrasts=tuple(c for c in group.contrasts if c.reference in arms and c.candidate in arms))
        units = recorded_units(part, run.windows, run.block_unit, names, same_build=same_build(group))
        entry = null_entry(history_id, blocks, window_s,
                           {n: [e for u, e in v if not (aside and u == 0)] for n, v in units.items()},
                           warmup={n: [e for u, e in v if aside and u == 0] for n, v in units.items()},
                           replicas=group.replicas, boot_s=boot_s)
        path = history.record(shape, entry)
        count = max((len(v) for v in units.values()), default=0)
        kept = " (the fresh host's first group kept aside: never pooled)" if aside else ""
        out.append(f"A/A history: {count} null unit(s) of {run.units} instance group(s) were added to {path}{kept}")
    return tuple(out)

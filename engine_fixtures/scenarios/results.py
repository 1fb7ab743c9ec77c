"""An arm's windows as a ``RunResult``, the budget a group is measured in, and a visit's warm-up.

``arm_result(group, arm, spec, cores, engine, windows, settings, meta, timeline, instances)``: what the runner records
for every arm. Its metadata carries the arm's ``timeline`` (``scenarios.timeline``), the window length, the mean
completed requests per window, ``window_instance``: the engine instance that served each window, and
``sample_windows``: for each metric not in every window (the per-segment values, ``scenarios.segment``), the windows
its samples came from (``RunResult.windows_of``), and ``refused_windows``: each window refused for a throttled GPU
(``scenarios.refusal.window_refusal``) with why; ``run_meta`` adds how the group was measured (blocks, their order and
unit, looks, the per-look alpha the verdicts used, the requests behind each window).

``control_ratios(group, name, windows)``: an arm's ``rel.*`` samples over the group's control (``Group.control``),
per block both measured; ``arm_result`` records them beside the levels, with the control's name.

``budget_of(group, settings)``: ``(Budget, blocks per unit)``. Mirrored blocks on one engine: ``--perf-repeats``
before the first look, then at most one more look after as many again (``live_budget``); fresh instance groups of
``--perf-ab-blocks`` blocks for separate launches (``group_budget``); a launch measured alone against its pool: a
block is one window, ``--perf-repeats`` more per look up to ``--perf-max-repeats``; measured rows: exactly their
blocks.

``refusal_finding(what, windows, first)``: the run's finding for a visit with refused windows (counted and named,
never silent), None without one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from engine_fixtures.engine.handle import EngineHandle
from engine_fixtures.engine.spec import EngineSpec
from engine_fixtures.judge.blocks import ratios_by_block
from engine_fixtures.judge.decide import MIN_BLOCKS
from engine_fixtures.judge.families import LIVE_REL_METRICS
from engine_fixtures.judge.metrics import REL_PREFIX
from engine_fixtures.judge.sequential import Budget
from engine_fixtures.options import Settings
from engine_fixtures.scenarios.blocks_run import VISIT_KEY, ArmWindows, GroupRun, arm_windows
from engine_fixtures.scenarios.group import Arm, Group
from engine_fixtures.scenarios.refusal import window_refusal
from engine_fixtures.scenarios.timeline import Timeline
from engine_fixtures.store.results import BLOCK_KEY, SAMPLE_WINDOWS_KEY, RunResult

GROUP_KEY = "window_instance_group"  # RunResult.metadata: the instance group of each window (separate launches)
REFUSED_KEY = "refused_windows"  # RunResult.metadata: {window index: why it counts toward no verdict}
# A live visit's nominal warm-up: 0 s, so it lasts exactly until its first wave has completed
# (``loadgen.stream_driver``). With 1 s it held two lockstep waves of the 4B shape (1.0-2.05 s, H200 2026-12-03) where
# one is what the rule asks for: the engine is warm (first light) and drained at every switch, so the first wave is
# the only one that meets the previous arm's state. An arm served as launched warms up --perf-warmup-s.
VISIT_WARMUP_S = 0.0


def live_budget(repeats: int, max_repeats: int) -> Budget:
    """Two looks, not one per block: every look divides alpha (Bonferroni), and with five metric families per
    contrast a look per block would cost more blocks than it saves. The last look comes after ``MIN_BLOCKS`` blocks at
    least (``--perf-repeats 1`` stopped at 2: no contrast could be decided)."""
    return Budget(repeats, max(repeats, 1), max(repeats, min(max_repeats, max(2 * repeats, MIN_BLOCKS))))


def group_budget(instances: int, most: int | None = None) -> Budget:
    """Instance groups: ``--perf-ab-instances`` before the first look, then one more at a time, up to
    ``--perf-ab-max-instances`` (default twice as many)."""
    return Budget(instances, 1, max(instances, most if most is not None else 2 * instances))


def budget_of(group: Group, settings: Settings) -> tuple[Budget, int]:
    if group.row_blocks is not None:
        return Budget(group.row_blocks, 1, group.row_blocks), 1
    if group.separate:
        return group_budget(settings.ab_instances, settings.ab_max_instances), settings.ab_blocks
    if group.contrasts:
        return live_budget(settings.repeats, settings.max_repeats), 1
    return Budget.repeated(settings.repeats, settings.max_repeats), 1


def visit_warmup(group: Group, settings: Settings) -> float:
    return VISIT_WARMUP_S if group.live and len(group.arms) > 1 else settings.warmup_s


def run_meta(group: Group, arm: Arm, run: GroupRun, per_unit: int,
             requests: Mapping[str, Sequence[dict[str, Any]]]) -> dict:
    """How ``arm`` was measured: its windows' blocks and visits, the group's block order, looks and alpha; a live arm's
    group and axes, a launch's instance groups (and with replicas, which replica served each window)."""
    members = {m: [m] * len(run.windows[m]) for m in group.members_of(arm.name)}
    windows, visits, reqs, member = arm_windows(group, run.windows, arm.name, run.visits, requests, members)
    meta: dict[str, Any] = {
        BLOCK_KEY: [b for b, _ in windows], VISIT_KEY: [list(v) for v in visits],
        "block_order": [list(o) for o in run.order], "blocks": run.blocks, "looks": run.progress.looks,
        "alpha_per_look": run.alpha_per_look, "undecided_at_budget": list(run.progress.undecided),
        "requests": list(reqs)}
    if group.live:
        return {**meta, "live_group": group.id, "live_arm": arm.name, "live_arm_axes": arm.live().label,
                "budget_blocks": run.budget_units}
    unit = [run.block_unit[b] if group.separate else 0 for b, _ in windows]
    return {**meta, "group": group.id, "group_member": arm.name, "instance_groups": len(set(unit)),
            "blocks_per_instance": per_unit, GROUP_KEY: unit, "budget_instance_groups": run.budget_units,
            "replicas": group.replicas, "window_replica": list(member)}


def control_ratios(group: Group, name: str, windows: ArmWindows) -> dict[str, tuple[float, ...]]:
    """Arm ``name``'s ``rel.<m>`` samples over the group's control, one per block both measured (none for the
    control itself, an arm of measured rows, or a group without a control)."""
    if name not in group.rel_arms:
        return {}
    own, control = windows[name], windows[group.control]  # type: ignore[index]
    out = {}
    for m in LIVE_REL_METRICS:
        ref = [(b, w[m]) for b, w in control if m in w]
        cand = [(b, w[m]) for b, w in own if m in w]
        ratios = ratios_by_block(m, [v for _, v in ref], [b for b, _ in ref], [v for _, v in cand],
                                 [b for b, _ in cand])
        if ratios:
            out[REL_PREFIX + m] = ratios
    return out


def arm_result(group: Group, arm: Arm, spec: EngineSpec, cores: float | None, engine: EngineHandle,
               windows: list[dict[str, float]], settings: Settings, extra: Mapping[str, Any], timeline: Timeline,
               instances: Sequence[str], ratios: Mapping[str, tuple[float, ...]] | None = None) -> RunResult:
    names = sorted({k for w in windows for k in w})
    samples = {n: tuple(w[n] for w in windows if n in w) for n in names}
    sparse = {n: [i for i, w in enumerate(windows) if n in w] for n in names if len(samples[n]) < len(windows)}
    done = [w["requests_per_s_counted"] * settings.window_s for w in windows if "requests_per_s_counted" in w]
    scenario = group.scenario_of(arm)
    meta = {"sglang_version": engine.version, "engine_key": engine.spec.key, "ready_s": engine.ready_s,
            "build": engine.spec.build.label, "log": str(engine.log_path), "scenario_id": scenario.id,
            "window_s": settings.window_s, "warmup_s": settings.warmup_s,
            "window_requests": round(float(np.mean(done)), 1) if done else 0.0,
            "window_instance": list(instances), "engine_instances": sorted(set(instances)),
            SAMPLE_WINDOWS_KEY: sparse, REFUSED_KEY: {str(i): why for i, why in refused(windows).items()},
            "cpus": list(engine.spec.cpus) if engine.spec.cpus else None,
            "role_cpus": engine.spec.role_cpus.describe() if engine.spec.role_cpus else None, **extra,
            "timeline": timeline.to_json()}
    if ratios:
        samples.update(ratios)  # per block, not per window: never in sample_windows
        meta["control"] = group.control
    axes = engine.spec.arm if arm.launch is not None else {**spec.with_(cpu_quota=cores).arm,
                                                           **live_axes(group, arm, spec)}
    return RunResult(group.key(spec, arm, cores), dict(axes), samples, metadata=meta)


def live_axes(group: Group, arm: Arm, launch: EngineSpec) -> dict[str, str]:
    """A live arm's axes beside its launch's: its name, load, copy or cache, thread cap and patches."""
    load = group.scenario_of(arm)
    engine = group.engine
    axes = {"live_arm": arm.name, "c": str(load.concurrency)}
    if load.image_px != engine.image_px or load.image_content != engine.image_content:  # type: ignore[union-attr]
        axes["px"] = str(load.image_px)
        axes["img"] = load.image_content
    if launch.mm_feature_transport == "cpu":
        axes["copy"] = arm.copy
    else:
        axes["ipc_cache"] = arm.ipc_cache
    if arm.threads is not None:
        axes["threads"] = str(arm.threads)
    for name, ms in arm.live().patches:
        axes[name] = f"{ms:g}"
    return axes


def refused(windows: Sequence[Mapping[str, float]]) -> dict[int, str]:
    """Each refused window's index among ``windows`` and why (``scenarios.refusal.window_refusal``)."""
    return {i: why for i, w in enumerate(windows) if (why := window_refusal(w)) is not None}


def refusal_finding(what: str, windows: Sequence[Mapping[str, float]], first: int = 0) -> str | None:
    """The finding for a visit to ``what`` whose ``windows`` (the arm's windows ``first``... in its result) include
    refused ones: how many, which, and why; None where none was refused."""
    found = refused(windows)
    if not found:
        return None
    which = "; ".join(f"window {first + i + 1}: {why}" for i, why in found.items())
    return (f"{what}: {len(found)} of {len(windows)} window(s) of a visit refused ({which}); they "
            "count toward no verdict (a block left without a window of an arm gives its contrasts no effect)")

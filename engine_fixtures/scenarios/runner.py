"""``GroupRunner``: the one runner of the GPU tier, without pytest. ``measure(group)`` returns what it measured.

1. Starts the group's engines (``--perf-candidate`` build unless an arm names its own; quota, GPUs and CPU set of this
   machine), each linted for hidden caps and loaded until it completes a full concurrency (first light): the one
   engine of a live group (reused from the factory), or a fresh instance group of separate launches (one at a time,
   equal KV pools, ``engine.group``) for every unit, the previous one proved and stopped first.
2. Measures mirrored blocks (``scenarios.blocks_run.measure``) until every contrast is decided (a group without
   contrasts: until its arms' verdicts against this host's pool are). A visit to a live arm, or to a launch arm
   switched on its engine (``Arm.switches``: the A/B serving a user's arms), sets its quota, switches the plugin's
   live arm (``EngineHandle.set_arm``, proved by every engine process; a build's own named patches kept) and refuses
   its windows unless the segment's proof counters say the arm served them; an arm of its own launch otherwise is
   served as launched and its launch arm is proved (``engine.proof.assert_arm``) before its engine stops. A window
   the GPU was throttled in counts toward no verdict (``scenarios.segment.throttle_refusal``): each visit that had
   one is a finding at once (``RunnerEnv.on_finding``, so a run that later fails still says so), and so is, once
   per group, each GPU field NVML does not report.
3. Profiles, where a verdict asks for it (``--perf-profile``): a contrast's two arms, candidate then reference; an arm
   judged against its pool, against the profile stored beside it.
4. Returns every arm's windows as a ``RunResult`` with its verdicts against this host's pool; a null A/B (the same
   build on both sides, nothing injected) adds its per-unit effects to this host's A/A history.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import psutil

from engine_fixtures.engine import proof as arm_proof
from engine_fixtures.engine.build import with_patch
from engine_fixtures.engine.factory import EngineFactory
from engine_fixtures.engine.group import start_group
from engine_fixtures.engine.handle import EngineHandle
from engine_fixtures.engine.lint import check_caps
from engine_fixtures.engine.proof import ArmProof
from engine_fixtures.engine.spec import EngineSpec, with_quota_setting
from engine_fixtures.errors import MeasurementError
from engine_fixtures.isolation.pinning import Stage, role_placement, stage_split
from engine_fixtures.judge.sequential import open_cells as open_cells_of
from engine_fixtures.judge.verdicts import Verdict
from engine_fixtures.loadgen.workload import WorkloadSpec
from engine_fixtures.options import Settings
from engine_fixtures.profile.engine import ProfileSettings, explain_ab, explain_history
from engine_fixtures.profile.report import ProfileBook
from engine_fixtures.scenarios import ab_history
from engine_fixtures.scenarios.blocks_run import (
    ArmWindows,
    GroupRun,
    Judging,
    arm_windows,
    contrast_verdicts,
    measure,
    open_cells,
)
from engine_fixtures.scenarios.group import AB_CANDIDATE, REPLICA_MARK, Arm, Group
from engine_fixtures.scenarios.load import SessionLoad
from engine_fixtures.scenarios.results import (
    arm_result,
    budget_of,
    control_ratios,
    refusal_finding,
    run_meta,
    visit_warmup,
)
from engine_fixtures.scenarios.segment import SegmentPlan, measure_segment
from engine_fixtures.scenarios.timeline import Timeline
from engine_fixtures.store.null_history import NullHistory
from engine_fixtures.store.results import RunResult

PoolVerdicts = Callable[[RunResult], list[Verdict]]  # an arm's result against this host's pool (the test's floor)


@dataclass(frozen=True)
class RunnerEnv:
    """What the runner needs of the session: the engines, the load client, the settings, the model, the floor of the
    test that asked first, the judge against this host's pools, where profiles and the A/A history go."""

    factory: EngineFactory
    load: SessionLoad
    settings: Settings
    model: Path
    floor: float | None
    pool_verdicts: PoolVerdicts
    profiles: ProfileBook
    pool_path: Callable[[str], Path]
    null_history: NullHistory
    history_id: str  # this run's id in the A/A history (machine key and run token)
    on_engine: Callable[[EngineHandle], None] = lambda _e: None  # a new engine (its log tail for a failing test)
    on_finding: Callable[[str], None] = lambda _f: None  # a fact for the run's findings (refused windows, NVML gaps)


@dataclass(frozen=True)
class Measured:
    group: Group  # as served (thread caps resolved)
    run: GroupRun
    judging: Judging
    results: Mapping[str, RunResult]  # per arm
    pools: Mapping[str, list[Verdict]]  # per arm, against this host's pool
    contrasts: Mapping[str, list[Verdict]]  # per contrast label, judged once at the end
    timeline: str
    profiles: Mapping[str, str] = field(default_factory=dict)  # contrast label or arm name -> failure text
    findings: tuple[str, ...] = ()

    def verdicts(self, label: str) -> list[Verdict]:
        return self.contrasts[self.group.contrast(label).label]


class GroupRunner:
    def __init__(self, env: RunnerEnv) -> None:
        self.env = env
        self.settings = env.settings

    # ------------------------------------------------------------------ launches
    def spec(self, arm: Arm, group: Group) -> EngineSpec:
        """The launch that serves ``arm``: its own, or the group's with the named patches its live arms switch
        installed at 0 ms (the plugin can only change the milliseconds of a patch the engine was started with)."""
        build = arm.build if arm.build is not None else self.settings.candidate
        if arm.launch is None or arm.switches:  # the named patches its engine's arms switch, at 0 ms
            names = sorted({n for a in group.arms if a.launch is None or group.engine_name(a.name) ==
                            group.engine_name(arm.name) for n, _ in a.patches})
            build = with_patch(build, dict.fromkeys(names, 0.0)) if names else build
        spec = group.scenario_of(arm) if arm.launch is not None else group.engine
        cpus = self.env.load.split.engine
        roles = role_placement(cpus) if cpus and self.settings.role_cpus == "on" else None
        out = spec.spec(self.env.model, self.settings.gpus, build, cpus=cpus, role_cpus=roles)  # type: ignore[union-attr]
        return with_quota_setting(out, self.settings.cpu_quota, self.settings.sources.get("cpu_quota", "default"))

    def _engines(self, specs: list[EngineSpec], timeline: Timeline) -> tuple[EngineHandle, ...]:
        """Ready engines for ``specs`` (several: one at a time, equal KV pools); starts and quota changes timed."""
        factory = self.env.factory
        started, changes, t0 = factory.started, factory.quota_changes, time.monotonic()
        engines = start_group(factory, specs) if len(specs) > 1 else (factory.get(specs[0]),)
        names = ", ".join(e.instance for e in engines)
        if factory.started > started:
            timeline.add("engine", f"start {names}", t0, time.monotonic(), names)
        elif factory.quota_changes > changes:
            timeline.add("quota", f"quota -> {specs[0].cpu_quota} on {names}", t0, time.monotonic(), names)
        for e in engines:
            self.env.on_engine(e)
        return tuple(engines)

    def _ready(self, engine: EngineHandle, scenario: Any, timeline: Timeline, peak: int | None = None) -> None:
        """Lint the effective configuration for hidden caps at the highest concurrency the engine will serve
        (``peak``: a live group's arms may switch the load), then load it to first light."""
        if scenario.lint:
            check_caps(engine.config, peak or scenario.concurrency)  # a hidden cap makes every number meaningless
        self.env.load.first_light(engine, scenario.workload(), timeline)

    def _stop(self, live: dict[str, EngineHandle], timeline: Timeline, *, release: bool, prove: bool = True) -> None:
        """Prove the launch arm of every engine of launches measured (once each; a live group's engine serves its
        arms, each proved at its visit), then stop them if ``release``."""
        engines = [e for e in dict.fromkeys(live.values()) if e in self.env.factory.live()]
        live.clear()
        if not engines or not (prove or release):
            return
        with timeline.span("stop", "proof of the launch arms" + (" and stop" if release else "")):
            try:
                for engine in engines if prove else ():
                    if engine.spec.proof:
                        arm_proof.assert_arm(engine.spec, engine.proof())
            finally:
                for engine in engines if release else ():
                    self.env.factory.release(engine.spec)

    # ------------------------------------------------------------------ measuring
    def measure(self, group: Group) -> Measured:
        timeline = Timeline()
        group = group.with_replicas(self.settings.ab_replicas)
        specs = {a.name: self.spec(a, group) for a in group.arms}
        workloads = {a.name: group.scenario_of(a).workload() for a in group.arms}
        for w in dict.fromkeys(workloads.values()):
            self.env.load.stream.prepare(w)  # the client encodes the images while the engines start
        applied = self.settings.cpu_quota.applied
        if group.live or group.switched:
            group = group.resolved(lambda a: applied(a.cores(specs[a.name].cpu_quota)))  # thread caps
        live: dict[str, EngineHandle] = {}  # per member (Group.members)
        served: dict[str, list[str]] = {m: [] for m in group.members}
        requests: dict[str, list[dict[str, Any]]] = {m: [] for m in group.members}
        switched: dict[str, ArmProof] = {}  # the proof of the latest switch, read with no load since
        started: dict[int, float] = {}  # the wall time each instance group started (the A/A history's warm-up rule)

        def start(unit: int) -> None:
            self._stop(live, timeline, release=True, prove=not group.switched)
            started[unit] = time.time()
            first = {group.engine_of(m): m for m in reversed(group.members)}  # per engine, its first member
            names = list(group.engines)
            random.shuffle(names)  # no launch always starts first (work directory, port, GPU memory)
            fresh = [specs[group.arm_of(first[n]).name].with_(
                name=f"{specs[group.arm_of(first[n]).name].name}-{n.replace(REPLICA_MARK, '-r')}-g{unit}")
                for n in names]
            for name, engine in zip(names, self._engines(fresh, timeline), strict=True):
                self._ready(engine, group.scenario_of(group.arm_of(first[name])), timeline)
                live.update({m: engine for m in group.members if group.engine_of(m) == name})

        def switch(member: str) -> EngineHandle:
            """The member's engine with its arm switched live (a live arm, or a launch arm that switches)."""
            arm, engine = group.arm_of(member), live[member]
            if not (group.live or arm.switches):
                return engine
            cores = applied(arm.cores(specs[arm.name].cpu_quota))
            if engine.spec.cpu_quota != cores:
                (engine,) = self._engines([engine.spec.with_(cpu_quota=cores)], timeline)
                live.update({m: engine for m, e in live.items() if e.instance == engine.instance})
            with timeline.span("switch", f"arm {arm.name}", engine.instance):
                switched["proof"] = engine.set_arm(arm_proof.on_launch(arm.live(), engine.spec))
            return engine

        unreported: set[str] = set()  # what NVML does not report, said once
        stage = self._stage_of(group)
        if stage is None and group.separate and len(group.members) > 1 and self.settings.ab_stage == "on":
            self.env.on_finding(f"{group.id}: the stage is off: the engines are not pinned (fewer than 8 visible CPUs "
                                "or --perf-engine-cpus off), so every member runs on every CPU beside the idle ones")
        staged: dict[str, str] = {}  # the member on the stage now

        def visit(member: str, n: int, _unit: int) -> list[dict[str, float]]:
            arm = group.arm_of(member)
            engine = switch(member)
            if stage is not None and staged.get("member") != live[member].instance:
                self._place(stage, live, member, timeline)
                staged["member"] = live[member].instance
            served[member] += [engine.instance] * n
            plan = SegmentPlan(workloads[arm.name], n, self.settings.window_s, visit_warmup(group, self.settings),
                               self.settings.sample_hz)
            notes: set[str] = set()
            if not (group.live or arm.switches):
                out = measure_segment(engine, self.env.load.stream, plan, timeline, engine.instance,
                                      requests=requests[member], notes=notes)
            else:
                def proved(before: ArmProof, after: ArmProof) -> None:
                    served = arm_proof.on_launch(arm.live(), engine.spec)
                    problems = arm_proof.live_arm_problems(engine.spec, served, before, after)
                    if problems:
                        raise MeasurementError(f"arm {arm.name} ({served.label}) did not serve its visit as "
                                               f"requested, so its windows are not measurements: {'; '.join(problems)}")

                out = measure_segment(engine, self.env.load.stream, plan, timeline, engine.instance, check=proved,
                                      requests=requests[member], before=switched.pop("proof"), notes=notes)
            for note in sorted(notes - unreported):
                self.env.on_finding(f"GPU telemetry: {note}")
            unreported.update(notes)
            refusal = refusal_finding(f"{group.id}/{member} on {engine.instance}", out, len(served[member]) - n)
            if refusal is not None:
                self.env.on_finding(refusal)
            return out

        budget, per_unit = budget_of(group, self.settings)
        judging = self._judging(group, specs, budget.maximum, budget.alpha_per_look())

        def undecided(windows, block_unit, alpha):  # type: ignore[no-untyped-def]
            if group.contrasts or group.row_blocks is not None:
                return open_cells(group, windows, block_unit, replace(judging, alpha=alpha))
            return open_cells_of(pools={a.name: self.env.pool_verdicts(self._result(
                group, a.name, windows, live, specs, timeline, served, {"alpha_per_look": alpha})) for a in group.arms})

        if not group.separate:
            (engine,) = self._engines([specs[group.arms[0].name]], timeline)
            self._ready(engine, group.engine if group.live else group.arms[0].launch, timeline, group.peak_concurrency)
            live.update(dict.fromkeys(specs, engine))
        run = measure(group, budget, visit, undecided, start=start if group.separate else None,
                      blocks_per_unit=per_unit)
        placed = {"stage": stage.describe() if stage is not None else "off"} if group.separate else {}
        results = {a.name: self._result(group, a.name, run.windows, live, specs, timeline, served,
                                        {**run_meta(group, a, run, per_unit, requests), **placed})
                   for a in group.arms}
        pools = {name: self.env.pool_verdicts(r) for name, r in results.items()}
        judging = replace(judging, alpha=run.alpha_per_look, budget=run.budget_units, final=True)  # once, at the end
        contrasts = {c.label: contrast_verdicts(group, c, run.windows, run.block_unit, judging)
                     for c in group.contrasts}
        measured = Measured(group, run, judging, results, pools, contrasts, "")
        staging = (lambda m: self._place(stage, live, m, timeline)) if stage is not None else None
        profiles = self._profile(measured, live, switch, workloads, staging)
        self._stop(live, timeline, release=group.separate, prove=not (group.live or group.switched))
        timeline.close()
        return replace(measured, timeline=f"{group.id}: {timeline.describe()}", profiles=profiles,
                       findings=self._record_nulls(measured, specs, started))

    def _stage_of(self, group: Group) -> Stage | None:
        """The stage of a group of launches with more than one member alive together (``--perf-ab-stage on``,
        ``isolation.pinning``): None for a live group, one member, the stage off, or engines not pinned."""
        if not group.separate or len(group.members) < 2 or self.settings.ab_stage != "on":
            return None
        cpus = self.env.load.split.engine
        if cpus is None:
            return None
        return stage_split(cpus, roles=self.settings.role_cpus == "on")

    def _place(self, stage: Stage, live: Mapping[str, EngineHandle], member: str, timeline: Timeline) -> None:
        """``member``'s engine onto the stage, every other member's onto the wings (each thread of each tree)."""
        measured = live[member]
        with timeline.span("stage", f"{measured.instance} onto the stage", measured.instance):
            for engine in dict.fromkeys(live.values()):
                engine.place(stage.placement(engine is measured))

    def _cores(self, group: Group, specs: Mapping[str, EngineSpec]) -> Callable[[str], float | None]:
        """Arm name -> the CPU quota it is served under (a switched arm's own, else its launch's)."""
        applied = self.settings.cpu_quota.applied
        return lambda n: (applied(group.arm(n).cores(specs[n].cpu_quota)) if group.live or group.arm(n).switches
                          else specs[n].cpu_quota)

    def _judging(self, group: Group, specs: Mapping[str, EngineSpec], budget: int, alpha: float) -> Judging:
        if not group.separate:
            return Judging(alpha, budget, self.env.floor)
        shapes = ab_history.shapes(group, specs, self._cores(group, specs), self._stage_of(group) is not None)
        null_for = ab_history.null_reader(self.env.null_history, shapes, self.settings.ab_blocks,
                                          self.settings.window_s)
        candidate = next((a.name for a in group.arms if group.side(a.name) == AB_CANDIDATE), None)
        return Judging(alpha, budget, self.env.floor, self.settings.ab_detect, null_for,
                       specs[candidate].arm if group.ab and candidate else None)

    def _result(self, group: Group, name: str, windows: ArmWindows, live: Mapping[str, EngineHandle],
                specs: Mapping[str, EngineSpec], timeline: Timeline, served: Mapping[str, list[str]],
                meta: dict[str, Any]) -> RunResult:
        """Arm ``name``'s result: its windows over its members (``blocks_run.arm_windows``), the engine that served
        each, and ``meta``."""
        arm, spec = group.arm(name), specs[name]
        cores = self._cores(group, specs)(name)
        own, instances = arm_windows(group, windows, name, served)
        return arm_result(group, arm, spec, cores, live[group.members_of(name)[0]], [w for _, w in own], self.settings,
                          meta, timeline, instances, control_ratios(group, name, windows))

    def _profile(self, measured: Measured, live: Mapping[str, EngineHandle],
                 switch: Callable[[str], EngineHandle], workloads: Mapping[str, WorkloadSpec],
                 staging: Callable[[str], None] | None = None) -> dict[str, str]:
        """The differential profile of each contrast whose verdicts ask for one (of an A/B's arms, the first: one pair
        of builds, about 20 s of windows a profile), arm against arm on the engines just measured (each moved onto the
        stage first, where the group has one: ``staging``); of an arm judged against its pool alone, against the
        profile stored beside the pool."""
        group, out = measured.group, {}

        def build(name: str) -> tuple[Any, Callable[[float], int]]:
            member = group.members_of(name)[0]  # one replica speaks for its launch
            engine = live[member]

            def url() -> str:
                if staging is not None:
                    staging(member)
                return switch(member).url

            return engine.pids(), self._drive(url, workloads[name])

        for c in group.contrasts:
            statuses = [v.status for v in measured.verdicts(c.label)]
            ps = ProfileSettings.from_settings(self.settings,
                                               live[group.members_of(c.candidate)[0]].workdir / "profiles" / c.id)
            if ps.wanted(statuses) and group.ab and out:  # one build pair: its first failing arm speaks for it
                out[c.label] = f"(the builds were profiled on the first arm that asked: {next(iter(out))})"
            elif ps.wanted(statuses):
                out[c.label] = explain_ab(self.env.profiles, [contrast_scenario(group, c.label)], statuses, ps,
                                          candidate=build(c.candidate), reference=build(c.reference))
        if not group.contrasts and group.row_blocks is None:
            for name, result in measured.results.items():
                statuses = [v.status for v in measured.pools[name]]
                ps = ProfileSettings.from_settings(self.settings, live[name].workdir / "profiles")
                out[name] = explain_history(self.env.profiles, [result.scenario], statuses, ps, build(name),
                                            self.env.pool_path(result.scenario))
        return out

    def _drive(self, url: Callable[[], str], workload: WorkloadSpec) -> Callable[[float], int]:
        """Load for a profile window (after the verdicts, never measured): the requests completed in it. ``url`` is
        asked at the start of each window (a live arm is switched there first)."""
        def drive(seconds: float) -> int:
            seg = self.env.load.stream.segment(url(), workload, self.settings.warmup_s, seconds)
            return len(seg.completed_in(seg.measure_at, seg.stop_at))
        return drive

    def _record_nulls(self, measured: Measured, specs: Mapping[str, EngineSpec],
                      started: Mapping[int, float]) -> tuple[str, ...]:
        """A group of launches adds its null units to this host's A/A history (``scenarios.ab_history``): the
        replicas' same-build pairs of every run, and a null A/B's (the same build on both sides, nothing injected)
        own units; a fresh host's first instance group is kept aside (``NullHistory.warmup_unit``)."""
        group = measured.group
        if not group.separate or self.settings.inject or not (ab_history.same_build(group) or group.replicas > 1):
            return ()
        history, boot = self.env.null_history, psutil.boot_time()
        return ab_history.record(group, measured.run, history, specs, self._cores(group, specs),
                                 self._stage_of(group) is not None, self.env.history_id, self.settings.ab_blocks,
                                 self.settings.window_s, 0 in started and history.warmup_unit(started[0], boot), boot)


def contrast_scenario(group: Group, label: str) -> str:
    """The name a contrast's rows are recorded under: ``live/<group>: <label>`` on one engine, ``group/...``
    across launches."""
    return f"{'live' if group.live else 'group'}/{group.id}: {label}"

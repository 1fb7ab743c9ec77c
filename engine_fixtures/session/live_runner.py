"""``LiveGroupRunner``: what the ``perf_live`` fixture does with a declared ``LiveGroup`` (one engine, many arms).

``perf_live.check(group, contrast) -> list[Verdict]``, ``perf_live.arm(group, name)``, ``perf_live.counter(group,
bound)``, ``perf_live.figure(seed_figure)`` (one of the seed's figures as measured rows, ``scenarios.figures``). The
first call of a session measures the group, once:
1. starts (or reuses) the group's one engine (``--perf-candidate`` build; quota, GPUs and CPU set of this machine)
   and lints its effective configuration for hidden caps;
2. loads a fresh engine until one probe segment completes a full concurrency of requests (its first requests
   compile kernels: never inside a measured window);
3. measures mirrored blocks of visits until every contrast of the group is decided (``scenarios.live_runs``); a
   visit sets the arm's quota on the live cgroup, switches the plugin's live arm (``EngineHandle.set_arm``, proved by
   every engine process), runs one segment and refuses its windows unless the segment's proof counters say the arm
   served them (``engine.proof.live_arm_problems``): a window whose proof disagrees is an error, not a measurement;
4. when a contrast's verdict asks for it (``--perf-profile``), profiles the two arms on the same engine, candidate
   then reference, and keeps the differential by function for the failure message and the report;
5. records every arm's windows as a result of its own (judged against this host's pool, if one exists) and stores
   them in the session registry.
``check`` judges one contrast from the stored windows and ends the test: a violated family raises
``InvariantViolated`` (known upstream regressions are strict xfails on it), an undecided one is ``Inconclusive``
in strict mode.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from engine_fixtures.engine import proof as arm_proof
from engine_fixtures.engine.build import with_patch
from engine_fixtures.engine.handle import EngineHandle
from engine_fixtures.engine.lint import check_caps
from engine_fixtures.engine.proof import ArmProof
from engine_fixtures.engine.spec import EngineSpec
from engine_fixtures.errors import MeasurementError
from engine_fixtures.judge.decide import MIN_BLOCKS
from engine_fixtures.judge.levels import FigureResult, figure_rows
from engine_fixtures.judge.sequential import Budget
from engine_fixtures.judge.verdicts import Verdict
from engine_fixtures.profile.engine import ProfileSettings, explain_ab
from engine_fixtures.scenarios.engine import EngineScenario
from engine_fixtures.scenarios.figures import SeedFigure, measure_figure
from engine_fixtures.scenarios.live import Arm, Contrast, LiveGroup
from engine_fixtures.scenarios.live_runs import (
    VISIT_KEY,
    LiveRun,
    contrast_verdicts,
    measure_live,
    open_cells,
)
from engine_fixtures.scenarios.pooled import engine_result
from engine_fixtures.scenarios.segment import SegmentPlan, measure_segment
from engine_fixtures.scenarios.timeline import Timeline
from engine_fixtures.session.gpu_runner import GpuRunner
from engine_fixtures.session.params import apply_quota_setting
from engine_fixtures.session.recorder import (
    InvariantJudge,
    conclude,
    conclude_contrast,
    session_verdicts,
    unreadable_of,
)
from engine_fixtures.store.baselines import Baseline
from engine_fixtures.store.results import BLOCK_KEY

# A visit's nominal warm-up: 0 s, so it lasts exactly until its first wave has completed (``loadgen.stream_driver``).
# With 1 s it held two lockstep waves of the 4B shape (1.0-2.05 s, H200 2026-12-03) where one is what the rule
# asks for: the engine is warm (first light) and drained at every switch, so the first wave is the only one that
# meets the previous arm's state.
VISIT_WARMUP_S = 0.0


@dataclass(frozen=True)
class Measured:
    """A live group measured once per session: its blocks, each arm's verdicts against this host's pool, and the
    floor they were judged with."""

    run: LiveRun
    pools: Mapping[str, list[Verdict]]
    floor: float | None


def live_budget(repeats: int, max_repeats: int) -> Budget:
    """Mirrored blocks: ``--perf-repeats`` before the first look, then at most one more look after as many again
    (never past ``--perf-max-repeats``). Two looks, not one per block: every look divides alpha (Bonferroni), and
    with five metric families per contrast a look per block would cost more blocks than it saves. The last look
    comes after ``MIN_BLOCKS`` blocks at least (``--perf-repeats 1`` stopped at 2: no contrast could be decided)."""
    return Budget(repeats, max(repeats, 1), max(repeats, min(max_repeats, max(2 * repeats, MIN_BLOCKS))))


class LiveGroupRunner(GpuRunner):
    # ------------------------------------------------------------------ the tests' calls
    def check(self, group: LiveGroup, contrast: Contrast | str) -> list[Verdict]:
        __tracebackhide__ = True
        contrast = group.contrast(contrast) if isinstance(contrast, str) else contrast
        run = self.measure(group)
        verdicts = contrast_verdicts(group, contrast, run.windows, budget=run.budget_blocks,
                                     alpha=run.alpha_per_look, floor=self.recorder.floor)
        scenario = f"live/{group.id}: {contrast.label}"
        for v in verdicts:
            self.session.record_invariant(self.request.node.nodeid, scenario, v)
        self.recorder.sections_for(scenario, {}, verdicts, f"contrast on one live engine ({run.blocks} blocks)")
        conclude_contrast(contrast.label, verdicts, self.settings.strict,
                          self.session.profiles.failure_text([scenario]))
        return verdicts

    def arm(self, group: LiveGroup, name: str) -> list[Verdict]:
        """Arm ``name`` against this host's pool (drift over time on one runner); ``no-baseline`` on a fresh host."""
        __tracebackhide__ = True
        self.measure(group)
        group.arm(name)  # a ConfigError naming the group's arms
        result = self.results.get(f"{group.id}/{name}")
        measured: Measured = self.results.group(f"live/{group.id}")
        verdicts = (measured.pools[name] if measured.floor == self.recorder.floor
                    else session_verdicts(self.session, result, floor=self.recorder.floor))  # this test's floor
        base = self.session.pool(result.scenario)
        missing = None if isinstance(base, Baseline) else getattr(base, "reason", None)
        self.recorder.sections_for(result.scenario, result.arm, verdicts, "this host's pool")
        conclude(result.scenario, verdicts, self.settings.strict, missing, unreadable=unreadable_of(base))
        return verdicts

    def counter(self, group: LiveGroup, bound: Any) -> Verdict:
        """A ``CounterBound`` on one arm of the group (its ``arm`` is the arm's name)."""
        __tracebackhide__ = True
        self.measure(group)
        return InvariantJudge(self.recorder, self.results).counter(replace(bound, arm=f"{group.id}/{bound.arm}"))

    def figure(self, figure: SeedFigure) -> FigureResult:
        """One of the seed's figures: its groups measured (once per session), each point's level with its interval
        beside the seed's number, each shape's ratio; recorded as report-only rows and drawn in the report. A
        point without windows is a ``MeasurementError``, never an empty row."""
        __tracebackhide__ = True
        for group in figure.groups():
            self.measure(group)
        result = measure_figure(figure, lambda g, arm: self.measure(g).windows[arm])
        scenario = f"seed/{figure.id}"
        rows = figure_rows(result)
        for v in rows:
            self.session.record_invariant(self.request.node.nodeid, scenario, v)
        self.session.figures.append(result)
        self.recorder.sections_for(scenario, {}, rows, f"the seed's figure {figure.id}: {figure.title}")
        return result

    # ------------------------------------------------------------------ measuring, once per session
    def measure(self, group: LiveGroup) -> LiveRun:
        cached = self.results.group(f"live/{group.id}")
        if cached is not None:
            return cached.run
        timeline = Timeline()
        workload = group.engine.workload()
        loads = {a.name: a.scenario(group.engine).workload() for a in group.arms}  # the load is switched live too
        for w in dict.fromkeys([workload, *loads.values()]):
            self.load.stream.prepare(w)  # the client encodes the images while the engine starts
        launch = self._launch(group)
        group = group.resolved(lambda a: self.settings.cpu_quota.applied(a.cores(launch.cpu_quota)))  # thread caps
        engine = self._engine(launch, timeline)
        if group.engine.lint:
            check_caps(engine.config, group.peak_concurrency)
        self.first_light(engine, workload, timeline)
        state = {"engine": engine}
        requests: dict[str, list[dict[str, Any]]] = {}  # per arm, the requests behind each window (in order)

        switched: dict[str, ArmProof] = {}  # the proof of the latest switch, read with no load since

        def switch(arm: Arm) -> EngineHandle:
            cores = self.settings.cpu_quota.applied(arm.cores(launch.cpu_quota))
            if state["engine"].spec.cpu_quota != cores:
                state["engine"] = self._engine(launch.with_(cpu_quota=cores), timeline)
            with timeline.span("switch", f"arm {arm.name}", engine.instance):
                switched["proof"] = state["engine"].set_arm(arm.live())
            return state["engine"]

        def visit(arm: Arm, n: int) -> list[dict[str, float]]:
            eng = switch(arm)
            # The first light warmed the engine and the previous visit drained it: a visit's warm-up is its first wave
            # (a nominal 0 s, ``loadgen.stream_driver``), all of it sent after the switch.
            plan = SegmentPlan(loads[arm.name], n, self.settings.window_s, VISIT_WARMUP_S, self.settings.sample_hz)

            def proved(before: ArmProof, after: ArmProof) -> None:
                problems = arm_proof.live_arm_problems(eng.spec, arm.live(), before, after)
                if problems:
                    raise MeasurementError(f"arm {arm.name} ({arm.live().label}) did not serve its visit as "
                                           f"requested, so its windows are not measurements: {'; '.join(problems)}")

            return measure_segment(eng, self.load.stream, plan, timeline, eng.instance, check=proved,
                                   requests=requests.setdefault(arm.name, []), before=switched.pop("proof"))

        rows = group.row_blocks  # measured rows only: nothing to decide, so exactly their blocks
        budget = (live_budget(self.settings.repeats, self.settings.max_repeats) if rows is None
                  else Budget(rows, 1, rows))
        run = measure_live(group, budget, visit,
                           lambda w, a: open_cells(group, w, budget=budget.maximum, alpha=a,
                                                   floor=self.recorder.floor),
                           random.Random())
        self._profile(group, run, switch, workload, state["engine"])
        timeline.close()
        pools = self._store(group, run, engine, launch, timeline, requests)
        self.request.node.add_report_section("call", "perf timeline", f"{group.id}: {timeline.describe()}")
        self.results.put_group(f"live/{group.id}", Measured(run, pools, self.recorder.floor))
        return run

    def _launch(self, group: LiveGroup) -> EngineSpec:
        """The group's one launch; the named patches its arms switch are installed at 0 ms (the plugin can only change
        the milliseconds of a patch the engine was started with)."""
        names = sorted({n for a in group.arms for n, _ in a.patches})
        build = with_patch(self.settings.candidate, dict.fromkeys(names, 0.0)) if names else self.settings.candidate
        spec = group.engine.spec(self.model, self.settings.gpus, build, cpus=self.load.split.engine)
        return apply_quota_setting(spec, self.settings.cpu_quota, self.settings.sources["cpu_quota"])

    def _engine(self, spec: EngineSpec, timeline: Timeline) -> EngineHandle:
        (engine,) = self.engines([spec], timeline)
        return engine

    def _profile(self, group: LiveGroup, run: LiveRun, switch: Callable[[Arm], EngineHandle],
                 workload: Any, engine: EngineHandle) -> None:
        """The differential profile of each contrast whose verdicts ask for one, arm against arm on this engine."""
        for contrast in group.contrasts:
            verdicts = contrast_verdicts(group, contrast, run.windows, budget=run.budget_blocks,
                                         alpha=run.alpha_per_look, floor=self.recorder.floor)
            ps = ProfileSettings.from_settings(self.settings, engine.workdir / "profiles" / contrast.id)
            statuses = [v.status for v in verdicts]
            if not ps.wanted(statuses):
                continue
            explain_ab(self.session.profiles, [f"live/{group.id}: {contrast.label}"], statuses, ps,
                       candidate=(engine.pids(), self.drive(lambda c=contrast: switch(group.arm(c.candidate)).url,
                                                            workload)),
                       reference=(engine.pids(), self.drive(lambda c=contrast: switch(group.arm(c.reference)).url,
                                                            workload)))

    def _store(self, group: LiveGroup, run: LiveRun, engine: EngineHandle, launch: EngineSpec,
               timeline: Timeline, requests: dict[str, list[dict[str, Any]]]) -> dict[str, list[Verdict]]:
        """Every arm's windows as its own result: in the registry, and recorded with its verdicts against this host's
        pool (returned by arm name, for ``arm``)."""
        pools: dict[str, list[Verdict]] = {}
        for arm in group.arms:
            windows = run.windows[arm.name]
            blocks = [b for b, _ in windows]
            cores = self.settings.cpu_quota.applied(arm.cores(launch.cpu_quota))
            key = LiveGroup.key(launch, group.engine, arm, cores)
            meta = {BLOCK_KEY: blocks, VISIT_KEY: [list(v) for v in run.visits[arm.name]], "live_group": group.id,
                    "live_arm": arm.name, "live_arm_axes": arm.live().label,
                    "block_order": [list(o) for o in run.order], "blocks": run.blocks, "looks": run.progress.looks,
                    "alpha_per_look": run.alpha_per_look, "budget_blocks": run.budget_blocks,
                    "undecided_at_budget": list(run.progress.undecided), "requests": requests.get(arm.name, [])}
            result = engine_result(engine, arm.scenario(group.engine), [w for _, w in windows], self.settings, meta,
                                   timeline=timeline, key=key, arm={**launch.with_(cpu_quota=cores).arm,
                                                                    **_live_axes(arm, group.engine, launch)})
            self.results.put(f"{group.id}/{arm.name}", result)
            pools[arm.name] = session_verdicts(self.session, result, floor=self.recorder.floor)
            base = self.session.pool(result.scenario)
            self.session.record(self.request.node.nodeid, result, pools[arm.name],
                                self.session.store.path_for(result.scenario) if isinstance(base, Baseline) else None)
        return pools


def _live_axes(arm: Arm, engine: EngineScenario, launch: EngineSpec) -> dict[str, str]:
    load = arm.scenario(engine)
    axes = {"live_arm": arm.name, "c": str(load.concurrency)}
    if load.image_px != engine.image_px or load.image_content != engine.image_content:
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


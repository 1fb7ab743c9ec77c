"""``EngineGroupRunner``: what the ``perf_group`` fixture does with a declared ``EngineGroup``, and the A/B of two
builds (``--perf-reference``, ``EngineScenarioRunner.ab``) as a group of two members.

``measure(group)``, once per session and group:
1. starts an instance group: every member's engine, one at a time with one explicit KV size, their pools read back
   and compared (``engine.group``), each linted for hidden caps and loaded until it completes a full concurrency
   (first light); the previous instance group's launch arms are proved and its engines stopped first;
2. measures ``--perf-ab-blocks`` mirrored blocks on it (``scenarios.groups.measure_group``), and more fresh instance
   groups while a contrast is undecided: ``--perf-ab-instances`` first, up to twice as many;
3. judges each contrast with the instance group as the unit, this host's A/A history pooled into the variance where
   one exists (``store.null_history``), and each verdict says which variance it used and what its pass excludes;
4. records each member's windows as a result (report-only rows: a member of a group is judged by its contrasts).
An A/B whose two builds are the same (a null A/B) adds its per-pair effects to this host's A/A history.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine_fixtures.engine.handle import EngineHandle
from engine_fixtures.engine.lint import check_caps
from engine_fixtures.engine.proof import assert_arm
from engine_fixtures.engine.spec import EngineSpec
from engine_fixtures.judge.gating import gating
from engine_fixtures.judge.metrics import metric
from engine_fixtures.judge.sequential import Budget
from engine_fixtures.judge.verdicts import Verdict
from engine_fixtures.profile.engine import ProfileSettings, explain_ab
from engine_fixtures.scenarios.engine import EngineScenario
from engine_fixtures.scenarios.groups import (
    EngineGroup,
    GroupRun,
    Member,
    group_verdicts,
    measure_group,
    unit_effects,
)
from engine_fixtures.scenarios.live import Contrast
from engine_fixtures.scenarios.pooled import engine_result
from engine_fixtures.scenarios.segment import SegmentPlan, measure_segment
from engine_fixtures.scenarios.timeline import Timeline
from engine_fixtures.session.gpu_runner import GpuRunner
from engine_fixtures.session.params import apply_quota_setting
from engine_fixtures.session.recorder import conclude, conclude_contrast
from engine_fixtures.store.null_history import NullHistory, null_entry, shape_key
from engine_fixtures.store.results import BLOCK_KEY, RunResult

GROUP_KEY = "window_instance_group"


def store_key(session: Any) -> str:
    """The run's id in the A/A history (machine key and this session's token)."""
    return f"{session.machine_key}#{session.run_token}"  # RunResult.metadata: the instance group of each window


@dataclass(frozen=True)
class MeasuredGroup:
    run: GroupRun
    results: Mapping[str, RunResult]  # per member
    shape: str  # the A/A history's key for this group's load
    last: Mapping[str, EngineHandle]  # the last instance group's engines (profiled, then stopped)


def group_budget(instances: int, most: int | None = None) -> Budget:
    """Instance groups: ``--perf-ab-instances`` before the first look, then one more at a time, up to
    ``--perf-ab-max-instances`` (default twice as many)."""
    return Budget(instances, 1, max(instances, most if most is not None else 2 * instances))


class EngineGroupRunner(GpuRunner):
    # ------------------------------------------------------------------ the tests' calls
    def check(self, group: EngineGroup, contrast: Contrast | str) -> list[Verdict]:
        __tracebackhide__ = True
        contrast = group.contrast(contrast) if isinstance(contrast, str) else contrast
        measured = self.measure(group)
        verdicts = self.verdicts(group, contrast, measured)
        scenario = f"group/{group.id}: {contrast.label}"
        where = self._profile(group, contrast, measured, verdicts, scenario)
        self._release(measured)
        for v in verdicts:
            self.session.record_invariant(self.request.node.nodeid, scenario, v)
        self.recorder.sections_for(scenario, {}, verdicts, f"group of engines ({measured.run.instances} instance "
                                                           f"group(s), {len(measured.run.block_unit)} blocks)")
        conclude_contrast(contrast.label, verdicts, self.settings.strict, where)
        return verdicts

    def ab(self, scenario: EngineScenario, group: EngineGroup) -> list[Verdict]:
        """The A/B of two builds: the group's one contrast over the scenario's gating metrics; a null A/B (the same
        build on both sides, nothing injected) is added to this host's A/A history."""
        __tracebackhide__ = True
        measured = self.measure(group)
        (contrast,) = group.contrasts
        ref, cand = measured.results["reference"], measured.results["candidate"]
        verdicts = self.verdicts(group, contrast, measured)
        where = self._profile(group, contrast, measured, verdicts, cand.scenario)
        self._release(measured)
        if group.member("reference").build == group.member("candidate").build:
            self._record_null(group, contrast, measured)
        self.results.put(scenario.id, cand)
        self.session.record(self.request.node.nodeid, cand, verdicts, None)
        self.session.record_diagnostic(ref, f"the A/B reference build {group.member('reference').build.label}")
        self.recorder.sections_for(cand.scenario, cand.arm, verdicts,
                                   f"A/B: {group.member('candidate').build.label} vs reference "
                                   f"{group.member('reference').build.label}")
        conclude(cand.scenario, verdicts, self.settings.strict, profile=where)
        return verdicts

    # ------------------------------------------------------------------ judging
    def verdicts(self, group: EngineGroup, contrast: Contrast, measured: MeasuredGroup) -> list[Verdict]:
        run = measured.run
        return self._judge(group, contrast, run.windows, run.block_unit, run.budget_units, run.alpha_per_look,
                           measured.shape, measured.results["candidate"].arm if group.gated_by_scenario else None)

    def _judge(self, group: EngineGroup, contrast: Contrast, windows: Mapping[str, Sequence[Any]],
               block_unit: Sequence[int], budget: int, alpha: float, shape: str,
               arm: Mapping[str, str] | None) -> list[Verdict]:
        """The contrast's rows: an A/B's over its scenario's gating metrics (``judge.gating``), a declared group's
        over the contrast's families; the same cells for the stopping rule and for the verdict."""
        history = self._history()
        blocks, window_s = self.settings.ab_blocks, self.settings.window_s
        names = None
        if group.gated_by_scenario:
            judged = {k for ws in windows.values() for _, w in ws for k in w
                      if metric(k).judged and metric(k).condition is None}
            names = gating(judged, arm or {})
        return group_verdicts(group, contrast, windows, block_unit, budget=budget, alpha=alpha,
                              floor=self.recorder.floor, detect=self.settings.ab_detect,
                              null_for=lambda n: history.sample(shape, n, blocks, window_s), arm=arm, names=names)

    def _history(self) -> NullHistory:
        store = self.session.store
        return NullHistory(store.root, store.machine_key, store.host)

    def _record_null(self, group: EngineGroup, contrast: Contrast, measured: MeasuredGroup) -> None:
        run = measured.run
        if run.instances < 1 or self.settings.inject:
            return
        ref, cand = run.windows[contrast.reference], run.windows[contrast.candidate]
        names = sorted({k for _, w in cand for k in w if metric(k).judged and metric(k).direction != "none"})
        units = {n: unit_effects(n, ref, cand, run.block_unit)[1] for n in names}
        path = self._history().record(measured.shape, null_entry(f"{store_key(self.session)}", self.settings.ab_blocks,
                                                                 self.settings.window_s, units))
        self.session.findings.append(f"A/A history: a null A/B of {run.instances} engine pair(s) was added to {path}")

    # ------------------------------------------------------------------ measuring, once per session
    def measure(self, group: EngineGroup) -> MeasuredGroup:
        cached = self.results.group(f"group/{group.id}")
        if cached is not None:
            return cached
        timeline = Timeline()
        workload = group.members[0].engine.workload()
        self.load.stream.prepare(workload)  # the client encodes the images while the engines start
        specs = {m.name: self._spec(m) for m in group.members}
        live: dict[str, EngineHandle] = {}
        requests: dict[str, list[dict[str, Any]]] = {}
        served: dict[str, list[str]] = {m.name: [] for m in group.members}

        def start(g: int) -> None:
            self._stop(live, timeline)
            names = list(specs)
            random.shuffle(names)  # neither member always starts first (work directory, port, GPU memory)
            engines = self.engines([specs[n].with_(name=f"{specs[n].name}-{n}-g{g}") for n in names], timeline)
            for name, engine in zip(names, engines, strict=True):
                if group.member(name).engine.lint:
                    check_caps(engine.config, group.member(name).engine.concurrency)
                self.first_light(engine, workload, timeline)
                live[name] = engine

        def visit(g: int, name: str, n: int) -> list[dict[str, float]]:
            eng = live[name]
            plan = SegmentPlan(workload, n, self.settings.window_s, self.settings.warmup_s, self.settings.sample_hz)
            served[name] += [eng.instance] * n
            return measure_segment(eng, self.load.stream, plan, timeline, eng.instance,
                                   requests=requests.setdefault(name, []))

        budget = group_budget(self.settings.ab_instances, self.settings.ab_max_instances)
        blocks = self.settings.ab_blocks
        first = specs[group.members[0].name]
        shape = shape_key(EngineScenario.key(first, group.members[0].engine), first.cpu_quota)
        arm = first.arm if group.gated_by_scenario else None

        def undecided(windows, block_unit, alpha):  # type: ignore[no-untyped-def]
            open_cells = []
            for c in group.contrasts:
                rows = self._judge(group, c, windows, block_unit, budget.maximum, alpha, shape, arm)
                if not any(v.status == "regression" for v in rows):
                    open_cells += [f"{c.label}: {v.metric}" for v in rows if v.status == "inconclusive"]
            return open_cells

        run = measure_group([m.name for m in group.members], start, visit, budget, blocks, undecided)
        timeline.close()
        results = {}
        for m in group.members:
            windows = run.windows[m.name]
            meta = {"group": group.id, "group_member": m.name, "blocks": len(run.block_unit),
                    "instance_groups": run.instances, "blocks_per_instance": blocks,
                    BLOCK_KEY: [b for b, _ in windows], GROUP_KEY: [run.block_unit[b] for b, _ in windows],
                    "looks": run.progress.looks, "alpha_per_look": run.alpha_per_look,
                    "budget_instance_groups": run.budget_units, "undecided_at_budget": list(run.progress.undecided),
                    "requests": requests.get(m.name, [])}
            suffix = "/build=reference" if m.name == "reference" else "" if m.name == "candidate" else \
                f"/group={group.id}"
            results[m.name] = engine_result(live[m.name], m.engine, [w for _, w in windows], self.settings, meta,
                                            suffix=suffix, timeline=timeline, instances=served[m.name])
        self.request.node.add_report_section("call", "perf timeline", f"{group.id}: {timeline.describe()}")
        measured = MeasuredGroup(run, results, shape, dict(live))
        self.results.put_group(f"group/{group.id}", measured)
        if not group.gated_by_scenario:
            for m in group.members:
                self.session.record_diagnostic(results[m.name], f"member {m.name} of group {group.id}")
        return measured

    def _spec(self, member: Member) -> EngineSpec:
        build = member.build if member.build is not None else self.settings.candidate
        spec = member.engine.spec(self.model, self.settings.gpus, build, cpus=self.load.split.engine)
        return apply_quota_setting(spec, self.settings.cpu_quota, self.settings.sources["cpu_quota"])

    def _stop(self, live: dict[str, EngineHandle], timeline: Timeline) -> None:
        """Prove the launch arm of every engine of the instance group just measured, then stop them (engines already
        stopped, by an earlier contrast of the group, are left out)."""
        running = self.factory.live()
        engines = [e for e in live.values() if e in running]
        live.clear()
        if not engines:
            return
        with timeline.span("stop", "proof and stop of the previous instance group"):
            try:
                for engine in engines:
                    if engine.spec.proof:
                        assert_arm(engine.spec, engine.proof())
            finally:
                for engine in engines:
                    self.factory.release(engine.spec)

    def _release(self, measured: MeasuredGroup) -> None:
        self._stop(dict(measured.last), Timeline())

    def _profile(self, group: EngineGroup, contrast: Contrast, measured: MeasuredGroup, verdicts: list[Verdict],
                 scenario: str) -> str:
        """The differential profile of the contrast's two members on the last instance group, when asked for: its
        failure text (top 3 per role), or ''."""
        cand, ref = measured.last.get(contrast.candidate), measured.last.get(contrast.reference)
        statuses = [v.status for v in verdicts]
        if cand is None or ref is None:
            return ""
        workload = group.member(contrast.candidate).engine.workload()
        ps = ProfileSettings.from_settings(self.settings, cand.workdir / "profiles")
        return explain_ab(self.session.profiles, [scenario], statuses, ps,
                          candidate=(cand.pids(), self.drive(lambda: cand.url, workload)),
                          reference=(ref.pids(), self.drive(lambda: ref.url, workload)))

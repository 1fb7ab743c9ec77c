"""``EngineScenarioRunner``: what the ``perf_gpu_tier`` fixture does with a declared ``EngineScenario``.

``perf_gpu_tier(scenario) -> list[Verdict]``:
1. builds the scenario's ``EngineSpec`` for this machine (model, GPUs, ``--perf-cpu-quota``, the engines' CPU
   set) and gets a ready engine from the session's factory (engines are reused across scenarios with the same
   launch: a different quota is written to the live engine's cgroup; concurrency and image size are the load's);
2. checks the effective configuration read back from ``/server_info`` for hidden caps (``engine.lint``);
3. measures until decided, in back-to-back windows from the session's one load client (``runs.SessionLoad``):
   against the pooled baseline (``runs.measure_history``), or, with ``--perf-reference BUILD``, as a paired A/B
   against that build measured interleaved on this runner (``runs.measure_ab``; each pair's two engines start
   together, in random order; ``--perf-candidate`` names the judged build, default the installed one);
4. checks the arm proof (the requested copy / IPC-cache implementation really ran in the engine's processes: of
   every A/B pair, before it is stopped);
5. stores the result in the session registry (cross-arm invariants read it) and ends the test by its
   verdicts (``report.recorder``: regression fails; inconclusive and improvement fail in strict mode).
"""

from __future__ import annotations

import random

from engine_fixtures.engine.build import EngineBuild
from engine_fixtures.engine.handle import EngineHandle
from engine_fixtures.engine.lint import check_caps
from engine_fixtures.engine.proof import assert_arm
from engine_fixtures.engine.spec import EngineSpec
from engine_fixtures.judge.verdicts import Verdict
from engine_fixtures.profile.engine import ProfileSettings, explain_ab, explain_history
from engine_fixtures.scenarios.engine import EngineScenario
from engine_fixtures.scenarios.runs import measure_ab, measure_history
from engine_fixtures.scenarios.timeline import Timeline
from engine_fixtures.session.gpu_runner import GpuRunner
from engine_fixtures.session.params import apply_quota_setting
from engine_fixtures.session.recorder import conclude

AB_MEM_FRACTION = 0.3  # two engines share one GPU during an A/B comparison


class EngineScenarioRunner(GpuRunner):
    def spec(self, scenario: EngineScenario, build: EngineBuild, mem: float | None = None) -> EngineSpec:
        spec = scenario.spec(self.model, self.settings.gpus, build, mem, cpus=self.load.split.engine)
        return apply_quota_setting(spec, self.settings.cpu_quota, self.settings.sources["cpu_quota"])

    def __call__(self, scenario: EngineScenario) -> list[Verdict]:
        __tracebackhide__ = True
        if self.settings.reference is not None:
            return self.ab(scenario)
        timeline = Timeline()
        self.load.stream.prepare(scenario.workload())  # the client encodes the images while the engine starts
        (engine,) = self.engines([self.spec(scenario, self.settings.candidate)], timeline)
        if scenario.lint:
            check_caps(engine.config, scenario.concurrency)  # a hidden cap would make every number meaningless
        # The stopping rule judges with the floor the final verdict uses (the marker's, else the session's).
        result = measure_history(engine, scenario, self.settings, self.recorder.verdicts, self.load.windows,
                                 timeline)
        if engine.spec.proof:
            assert_arm(engine.spec, engine.proof())
        self._timeline(scenario, timeline)
        statuses = [v.status for v in self.recorder.verdicts(result)]
        explain_history(self.session.profiles, [result.scenario], statuses, self._profile_settings(engine),
                        (engine.pids(), self.drive(lambda: engine.url, scenario.workload())),
                        self.session.store.path_for(result.scenario))
        self.results.put(scenario.id, result)
        return self.recorder(result)

    def _profile_settings(self, engine: EngineHandle) -> ProfileSettings:
        return ProfileSettings.from_settings(self.settings, engine.workdir / "profiles")

    def _timeline(self, scenario: EngineScenario, timeline: Timeline) -> None:
        self.request.node.add_report_section("call", "perf timeline", f"{scenario.id}: {timeline.describe()}")

    def ab(self, scenario: EngineScenario) -> list[Verdict]:
        __tracebackhide__ = True
        ref_spec = self.spec(scenario, self.settings.reference, AB_MEM_FRACTION)
        cand_spec = self.spec(scenario, self.settings.candidate, AB_MEM_FRACTION)
        timeline = Timeline()
        self.load.stream.prepare(scenario.workload())
        started: list[EngineSpec] = []

        def release_pair() -> None:
            """Check the arm proof of the pair just measured, then stop it (a fresh start per pair)."""
            with timeline.span("stop", "proof and stop of the previous pair"):
                for spec in started:
                    engine = self.factory.get(spec)
                    if engine.spec.proof:
                        assert_arm(engine.spec, engine.proof())
                for spec in started:
                    self.factory.release(spec)
            started.clear()

        def pair(i: int):  # type: ignore[no-untyped-def]
            release_pair()
            specs = [ref_spec.with_(name=f"{ref_spec.name}-ref{i}"), cand_spec.with_(name=f"{cand_spec.name}-cand{i}")]
            random.shuffle(specs)  # neither build always gets the first work directory, port or cgroup
            started.extend(specs)
            engines = self.engines(specs, timeline)
            for engine in engines:
                if scenario.lint:
                    check_caps(engine.config, scenario.concurrency)
            by_name = {e.spec.name: e for e in engines}
            return by_name[f"{cand_spec.name}-cand{i}"], by_name[f"{ref_spec.name}-ref{i}"]

        outcome = measure_ab(pair, scenario, self.settings, self.load.windows, timeline,
                             instances=self.settings.ab_instances)
        cand, ref = (self.factory.get(s) for s in sorted(started, key=lambda s: "-ref" in s.name))
        where = explain_ab(self.session.profiles, [outcome.candidate.scenario],
                           [v.status for v in outcome.verdicts], self._profile_settings(cand),
                           candidate=(cand.pids(), self.drive(lambda: cand.url, scenario.workload())),
                           reference=(ref.pids(), self.drive(lambda: ref.url, scenario.workload())))
        release_pair()
        self._timeline(scenario, timeline)
        self.results.put(scenario.id, outcome.candidate)
        self.session.record(self.request.node.nodeid, outcome.candidate, outcome.verdicts, None)
        self.session.record_diagnostic(outcome.reference, f"the A/B reference build {self.settings.reference.label}")
        self.recorder.sections_for(outcome.candidate.scenario, outcome.candidate.arm, outcome.verdicts,
                                   f"A/B: {self.settings.candidate.label} vs reference {self.settings.reference.label}")
        conclude(outcome.candidate.scenario, outcome.verdicts, self.settings.strict, profile=where)
        return list(outcome.verdicts)

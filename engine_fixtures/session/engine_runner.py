"""``EngineScenarioRunner``: what the ``perf_gpu_tier`` fixture does with a declared ``EngineScenario``.

``perf_gpu_tier(scenario) -> list[Verdict]``:
1. builds the scenario's ``EngineSpec`` for this machine (model, GPUs, ``--perf-cpu-quota``, the engines' CPU
   set) and gets a ready engine from the session's factory (engines are reused across scenarios with the same
   launch: a different quota is written to the live engine's cgroup; concurrency and image size are the load's);
2. checks the effective configuration read back from ``/server_info`` for hidden caps (``engine.lint``);
3. measures until decided, in back-to-back windows from the session's one load client
   (``scenarios.load.SessionLoad``): against the pooled baseline (``scenarios.pooled.measure_history``), or, with
   ``--perf-reference BUILD``, as an A/B against that build measured interleaved on this runner (a group of two
   members, ``group_runner``: fresh engine pairs, each started one engine at a time with equal KV pools;
   ``--perf-candidate`` names the judged build, default the installed one);
4. checks the arm proof (the requested copy / IPC-cache implementation really ran in the engine's processes: of
   every A/B pair, before it is stopped);
5. stores the result in the session registry (cross-arm invariants read it) and ends the test by its
   verdicts (``session.recorder``: regression fails; inconclusive and improvement fail in strict mode).
"""

from __future__ import annotations

from engine_fixtures.engine.build import EngineBuild
from engine_fixtures.engine.handle import EngineHandle
from engine_fixtures.engine.lint import check_caps
from engine_fixtures.engine.proof import assert_arm
from engine_fixtures.engine.spec import EngineSpec
from engine_fixtures.judge.verdicts import Verdict
from engine_fixtures.profile.engine import ProfileSettings, explain_history
from engine_fixtures.scenarios.engine import EngineScenario
from engine_fixtures.scenarios.groups import ab_group
from engine_fixtures.scenarios.live import FAMILIES
from engine_fixtures.scenarios.pooled import measure_history
from engine_fixtures.scenarios.timeline import Timeline
from engine_fixtures.session.gpu_runner import GpuRunner
from engine_fixtures.session.group_runner import EngineGroupRunner
from engine_fixtures.session.params import apply_quota_setting


class EngineScenarioRunner(GpuRunner):
    def spec(self, scenario: EngineScenario, build: EngineBuild) -> EngineSpec:
        spec = scenario.spec(self.model, self.settings.gpus, build, cpus=self.load.split.engine)
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
        """The A/B against ``--perf-reference``: a group of two members, the reference and the candidate build
        (``group_runner``: fresh engine pairs as the unit, this host's A/A history pooled into the variance)."""
        __tracebackhide__ = True
        group = ab_group(scenario, self.settings.reference, self.settings.candidate, FAMILIES)
        runner = EngineGroupRunner(self.request, self.factory, self.recorder, self.results, self.model, self.load)
        return runner.ab(scenario, group)

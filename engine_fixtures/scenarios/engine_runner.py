"""``EngineScenarioRunner``: what the ``perf_engine`` fixture does with a declared ``EngineScenario``.

``perf_engine(scenario) -> list[Verdict]``:
1. builds the scenario's ``EngineSpec`` for this machine (model, GPUs, ``--perf-cpu-quota``) and gets a ready
   engine from the session's factory (engines are reused across scenarios with the same spec);
2. checks the effective configuration read back from ``/server_info`` for hidden caps (``engine.lint``);
3. measures until decided: against the pooled baseline (``runs.measure_history``), or, with
   ``--perf-reference BUILD``, as a paired A/B against that build measured interleaved on this runner
   (``runs.measure_ab``; ``--perf-candidate`` names the judged build, default the installed one);
4. checks the arm proof (the requested copy / IPC-cache implementation really ran in the engine's processes);
5. stores the result in the session registry (cross-arm invariants read it) and ends the test by its
   verdicts (``report.recorder``: regression fails; inconclusive and improvement fail in strict mode).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine_fixtures.engine.build import parse_reference
from engine_fixtures.engine.factory import EngineFactory
from engine_fixtures.engine.handle import EngineHandle
from engine_fixtures.engine.lint import check_caps
from engine_fixtures.engine.params import apply_quota_setting
from engine_fixtures.engine.proof import assert_arm
from engine_fixtures.engine.spec import EngineSpec
from engine_fixtures.judge.verdicts import Verdict
from engine_fixtures.report import sections
from engine_fixtures.report.recorder import PerfRecorder, conclude, session_verdicts
from engine_fixtures.scenarios.engine import EngineScenario
from engine_fixtures.scenarios.registry import ScenarioResults
from engine_fixtures.scenarios.runs import measure_ab, measure_history

AB_MEM_FRACTION = 0.3  # two engines share one GPU during an A/B comparison


class EngineScenarioRunner:
    def __init__(self, request: pytest.FixtureRequest, factory: EngineFactory, recorder: PerfRecorder,
                 results: ScenarioResults, model: Path) -> None:
        self.request = request
        self.factory = factory
        self.recorder = recorder
        self.session = recorder.session
        self.results = results
        self.model = model

    @property
    def settings(self):  # type: ignore[no-untyped-def]
        return self.session.settings

    def spec(self, scenario: EngineScenario, build_text: str | None = None, mem: float | None = None) -> EngineSpec:
        build = parse_reference(build_text) if build_text else None
        spec = scenario.spec(self.model, self.settings.gpus, build, mem)
        return apply_quota_setting(spec, self.settings.cpu_quota, self.settings.sources["cpu_quota"])

    def _engine(self, spec: EngineSpec) -> EngineHandle:
        engine = self.factory.get(spec)
        sections.add_on_failure(self.request.node, f"engine log (tail) {spec.build.label}", engine.log_tail)
        return engine

    def __call__(self, scenario: EngineScenario) -> list[Verdict]:
        __tracebackhide__ = True
        if self.settings.reference:
            return self.ab(scenario)
        engine = self._engine(self.spec(scenario, self.settings.candidate))
        if scenario.lint:
            check_caps(engine.config, scenario.concurrency)  # a hidden cap would make every number meaningless
        result = measure_history(engine, scenario, self.settings, lambda r, a: session_verdicts(self.session, r, a))
        if engine.spec.proof:
            assert_arm(engine.spec, engine.proof())
        self.results.put(scenario.id, result)
        return self.recorder(result)

    def ab(self, scenario: EngineScenario) -> list[Verdict]:
        __tracebackhide__ = True
        ref_spec = self.spec(scenario, self.settings.reference, AB_MEM_FRACTION)
        cand_spec = self.spec(scenario, self.settings.candidate, AB_MEM_FRACTION)
        live = self.factory.max_live
        self.factory.max_live = max(live, 2)
        started: list = []

        def pair(i: int):  # type: ignore[no-untyped-def]
            for spec in started:  # the previous pair goes first: a fresh start of each build per pair
                self.factory.release(spec)
            started.clear()
            ref = ref_spec.with_(name=f"{ref_spec.name}-ref{i}")
            cand = cand_spec.with_(name=f"{cand_spec.name}-cand{i}")
            started.extend((ref, cand))
            engines = self._engine(ref), self._engine(cand)
            for engine in engines:
                if scenario.lint:
                    check_caps(engine.config, scenario.concurrency)
            return engines[1], engines[0]

        try:
            outcome = measure_ab(pair, scenario, self.settings, instances=self.settings.ab_instances)
            for spec in started:
                engine = self.factory.get(spec)
                if engine.spec.proof:
                    assert_arm(engine.spec, engine.proof())
        finally:
            self.factory.max_live = live
        self.session.reference = self.settings.reference or ""
        self.results.put(scenario.id, outcome.candidate)
        self.session.record(self.request.node.nodeid, outcome.candidate, outcome.verdicts, None)
        self.session.record_diagnostic(outcome.reference, f"the A/B reference build {self.settings.reference}")
        self.recorder.sections_for(outcome.candidate.scenario, outcome.candidate.arm, outcome.verdicts,
                                   f"A/B: {self.settings.candidate} vs reference {self.settings.reference}")
        conclude(outcome.candidate.scenario, outcome.verdicts, self.settings.strict)
        return list(outcome.verdicts)

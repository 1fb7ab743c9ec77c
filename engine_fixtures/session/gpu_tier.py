"""``GpuTier``: what the ``perf_gpu_tier`` fixture does with a declared ``Group`` (or one ``EngineScenario``).

``perf_gpu_tier(scenario)`` (one launch judged against this host's pool; with ``--perf-reference`` the A/B of two
builds of it, ``Group.ab_of``), ``perf_gpu_tier.check(group, contrast)``, ``.arm(group, name)``, ``.counter(group,
bound)``, ``.figure(seed_figure)``. The first call of a session measures the group, once, through the one runner
(``scenarios.runner.GroupRunner``), records every arm's result with its verdicts against this host's pool, and keeps
what it measured in the session registry. Every call then takes one path: record its rows, attach them as a report
section, and end the test by them (``session.recorder.finish``): a violated contrast raises ``InvariantViolated``
(known upstream regressions are strict xfails on it), a regression against a pool ``PerformanceRegression``, an
undecided row is ``Inconclusive`` in strict mode.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from engine_fixtures.engine.factory import EngineFactory
from engine_fixtures.errors import ConfigError, NotApplicable
from engine_fixtures.judge.levels import FigureResult, figure_rows
from engine_fixtures.judge.verdicts import Verdict
from engine_fixtures.scenarios.engine import EngineScenario
from engine_fixtures.scenarios.figures import SeedFigure, measure_figure
from engine_fixtures.scenarios.group import Arm, Contrast, CounterBound, Group
from engine_fixtures.scenarios.load import SessionLoad
from engine_fixtures.scenarios.runner import GroupRunner, Measured, RunnerEnv, contrast_scenario
from engine_fixtures.session import marks, sections
from engine_fixtures.session.marks import AB_KEY
from engine_fixtures.session.recorder import InvariantJudge, PerfRecorder, conclude_contrast, session_verdicts
from engine_fixtures.session.registry import ScenarioResults
from engine_fixtures.store.baselines import Baseline
from engine_fixtures.store.null_history import NullHistory


def arm_id(group: Group, name: str) -> str:
    """An arm's id in the session registry (what counters and invariants name): ``<group>/<arm>``, or the launch's
    own id for one launch measured alone."""
    return name if name == group.id else f"{group.id}/{name}"


class GpuTier:
    def __init__(self, request: pytest.FixtureRequest, factory: EngineFactory, recorder: PerfRecorder,
                 results: ScenarioResults, model: Path, load: SessionLoad) -> None:
        self.request = request
        self.factory = factory
        self.recorder = recorder
        self.session = recorder.session
        self.results = results
        self.model = model
        self.load = load

    @property
    def settings(self):  # type: ignore[no-untyped-def]
        return self.session.settings

    # ------------------------------------------------------------------ the tests' calls
    def __call__(self, scenario: EngineScenario, arms: Sequence[Arm] = ()) -> list[Verdict]:
        """One launch against this host's pool; in a test marked ``ab``, the A/B of the two builds that
        ``--perf-reference`` and ``--perf-candidate`` named (resolved at collection, ``marks.resolve_reference``),
        serving ``arms`` (live arms switched on each build's engines, each its own contrast) where given. An arm
        under a CPU quota where no quota can be set here is left out, and the run's findings say so."""
        __tracebackhide__ = True
        builds = self.request.node.stash.get(AB_KEY, None)
        if builds is None:
            return self.arm(Group.launch(scenario), scenario.id)
        group = Group.ab_of(scenario, *builds, arms=self._quota_permitted(self._selected(arms)))
        if len(group.contrasts) == 1:
            return self.check(group, group.contrasts[0])
        verdicts = [v for c in group.contrasts for v in self.check(group, c, finish=False)]
        profiles = self.measure(group).profiles
        conclude_contrast(f"{group.id}, every arm", verdicts, self.settings.strict,
                          "\n".join(profiles[c.label] for c in group.contrasts if profiles.get(c.label)))
        return verdicts

    def _selected(self, arms: Sequence[Arm]) -> tuple[Arm, ...]:
        """The arms ``--perf-ab-arms`` names (all where it is unset; a test that declares none runs its launch)."""
        names = self.settings.ab_arms
        if not names or not arms:
            return tuple(arms)
        unknown = [n for n in names if n not in {a.name for a in arms}]
        if unknown:
            raise ConfigError(f"--perf-ab-arms names {', '.join(unknown)}, which this test does not declare: its arms "
                              f"are {', '.join(a.name for a in arms)} (from {self.settings.sources.get('ab_arms')})")
        left = [a.name for a in arms if a.name not in names]
        if left:
            self.session.findings.append(f"the A/B left out {', '.join(left)}: --perf-ab-arms {','.join(names)}")
        return tuple(a for a in arms if a.name in names)

    def _quota_permitted(self, arms: Sequence[Arm]) -> tuple[Arm, ...]:
        quota, source = self.settings.cpu_quota, self.settings.sources.get("cpu_quota", "default")
        needs = [a for a in arms if quota.applied(a.cores(None)) is not None]
        why = marks.cgroup_skip_reason(quota, source) if needs else None
        if why is None:
            return tuple(arms)
        self.session.findings.append(f"the A/B left out {', '.join(a.name for a in needs)}: {why}")
        return tuple(a for a in arms if a not in needs)

    def check(self, group: Group, contrast: Contrast | str, finish: bool = True) -> list[Verdict]:
        """A contrast's verdicts, recorded and attached; with ``finish`` the test ends by them."""
        __tracebackhide__ = True
        contrast = group.contrast(contrast) if isinstance(contrast, str) else contrast
        measured = self.measure(group)
        verdicts = measured.verdicts(contrast.label)
        unit = (f"{measured.run.units} instance group(s), {measured.run.blocks} blocks" if group.separate else
                f"{measured.run.blocks} blocks")
        where = f"contrast {'on one live engine' if group.live else 'of launches'} ({unit})"
        if group.ab:
            ref, cand = group.arm(contrast.reference).build, group.arm(contrast.candidate).build
            where = f"A/B: {cand.label} vs reference {ref.label} ({unit})"  # type: ignore[union-attr]
        self.recorder.finish(contrast_scenario(group, contrast.label), {}, verdicts, where, kind="contrast",
                             label=contrast.label, profile=measured.profiles.get(contrast.label, ""), end=finish)
        return verdicts

    def arm(self, group: Group, name: str) -> list[Verdict]:
        """Arm ``name`` against this host's pool (drift over time on one runner); ``no-baseline`` on a fresh host."""
        __tracebackhide__ = True
        measured = self.measure(group)
        group.arm(name)  # a ConfigError naming the group's arms
        result = measured.results[name]
        verdicts = (measured.pools[name] if measured.judging.floor == self.recorder.floor
                    else session_verdicts(self.session, result, floor=self.recorder.floor))  # this test's floor
        base = self.session.pool(result.scenario)
        self.recorder.finish(result.scenario, result.arm, verdicts, "this host's pool", kind="pool", pool=base,
                             profile=measured.profiles.get(name, ""))
        return verdicts

    def counter(self, group: Group, bound: CounterBound) -> Verdict:
        """A ``CounterBound`` on one arm of the group (its ``arm`` is the arm's name)."""
        __tracebackhide__ = True
        self.measure(group)
        return InvariantJudge(self.recorder, self.results).counter(replace(bound, arm=arm_id(group, bound.arm)))

    def figure(self, figure: SeedFigure) -> FigureResult:
        """One of the seed's figures: its groups measured (once per session), each point's level with its interval
        beside the seed's number, each shape's ratio; recorded as report-only rows and drawn in the report. A
        point without windows is a ``MeasurementError``, never an empty row."""
        __tracebackhide__ = True
        for group in figure.groups():
            self.measure(group)
        result = measure_figure(figure, lambda g, arm: self.measure(g).run.windows[arm])
        rows = figure_rows(result)
        self.session.figures.append(result)
        self.recorder.finish(f"seed/{figure.id}", {}, rows, f"the seed's figure {figure.id}: {figure.title}",
                             kind="rows")
        return result

    # ------------------------------------------------------------------ measuring, once per session
    def measure(self, group: Group) -> Measured:
        __tracebackhide__ = True
        cached = self.results.group(group)  # the declaration itself: two groups of one id never share
        if cached is not None:
            return cached
        store = self.session.store
        env = RunnerEnv(self.factory, self.load, self.settings, self.model, self.recorder.floor,
                        lambda r: session_verdicts(self.session, r, floor=self.recorder.floor), self.session.profiles,
                        store.path_for, NullHistory(store.root, store.machine_key, store.host),
                        f"{self.session.machine_key}#{self.session.run_token}", self._on_engine, self._on_finding)
        try:
            measured = GroupRunner(env).measure(group)
        except NotApplicable as exc:
            pytest.skip(str(exc))
        self.session.findings.extend(measured.findings)
        for name, result in measured.results.items():
            self.results.put(arm_id(group, name), result)
            base = self.session.pool(result.scenario)
            self.session.record(self.request.node.nodeid, result, measured.pools[name],
                                store.path_for(result.scenario) if isinstance(base, Baseline) else None)
        self.request.node.add_report_section("call", "perf timeline", measured.timeline)
        self.results.put_group(group, measured)
        return measured

    def _on_finding(self, finding: str) -> None:
        """A fact for the session's findings, said once however many groups find it (NVML's gaps)."""
        if finding not in self.session.findings:
            self.session.findings.append(finding)

    def _on_engine(self, engine: Any) -> None:
        sections.add_on_failure(self.request.node, f"engine log (tail) {engine.spec.build.label} {engine.instance}",
                                engine.log_tail)

"""``CpuTierScenario``: the CPU tier's arm set, measured interleaved in one run, with its control arm and contrasts.

``measure(scenario, settings, judge)`` runs every arm through ``cpu_tier.driver.run_arms`` and keeps adding
rounds (``--perf-repeats`` first, then the same again, up to ``--perf-max-repeats`` or the scenario's
``max_rounds`` where that option is left at its default, ``rounds_budget``) while any arm's
verdict against its baseline (``judge(result, alpha)``) or any contrast is inconclusive. A contrast is the GPU
tier's ``Contrast`` (``scenarios.group``) between two arms' ids, judged per round (a round is half a mirrored block,
``judge.paired.judge_rounds``). It returns the
results by arm id. The control arm's own numbers are the machine's speed: they are recorded as diagnostics,
and every other arm also carries ``rel.*`` metrics over the control's in the same round.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from engine_fixtures.cpu_tier.arms import CpuTierArm
from engine_fixtures.cpu_tier.driver import After, run_arms
from engine_fixtures.judge import sequential
from engine_fixtures.judge.paired import judge_rounds
from engine_fixtures.judge.sequential import Budget
from engine_fixtures.judge.verdicts import Verdict
from engine_fixtures.options import Settings
from engine_fixtures.scenarios.group import Contrast
from engine_fixtures.store.results import RunResult

Judge = Callable[[RunResult, float], Sequence[Verdict]]


@dataclass(frozen=True)
class CpuTierScenario:
    name: str
    arms: tuple[CpuTierArm, ...]
    control: CpuTierArm | None = None
    contrasts: tuple[Contrast, ...] = ()
    warmup: int = 2
    requests: int = 48
    max_rounds: int | None = None  # the rounds it may take while undecided (None: --perf-max-repeats); an explicit
    # --perf-max-repeats still wins

    @property
    def judged_arms(self) -> tuple[CpuTierArm, ...]:
        return tuple(a for a in self.arms if a != self.control)


def open_cells(scenario: CpuTierScenario, results: Sequence[RunResult], judge: Judge, alpha: float) -> list[str]:
    """The arms' pool cells and the contrasts' cells still undecided (``judge.sequential.open_cells``)."""
    by = {a.id: r for a, r in zip(scenario.arms, results, strict=True)}
    return sequential.open_cells(
        pools={arm.id: judge(by[arm.id], alpha) for arm in scenario.judged_arms},
        contrasts={c.label: judge_rounds(c.label, c.metrics, by[c.reference].samples, by[c.candidate].samples,
                                         c.bound_of, alpha) for c in scenario.contrasts})


def rounds_budget(scenario: CpuTierScenario, settings: Settings) -> Budget:
    """``--perf-repeats`` rounds first, the same again at each look, up to the scenario's ``max_rounds`` where
    ``--perf-max-repeats`` was left at its default, else up to that option."""
    most = settings.max_repeats
    if scenario.max_rounds is not None and settings.sources.get("max_repeats", "default") == "default":
        most = scenario.max_rounds
    return Budget.repeated(settings.repeats, most)


def measure(scenario: CpuTierScenario, settings: Settings, judge: Judge,
            after: After | None = None) -> dict[str, RunResult]:
    """``after``: ``run_arms``' hook once the rounds are decided (the profiler's dedicated rounds)."""
    results = run_arms(scenario.arms, rounds_budget(scenario, settings), scenario.warmup, scenario.requests,
                       control=scenario.control, injection=settings.inject,
                       undecided=lambda rs, alpha: open_cells(scenario, rs, judge, alpha), after=after)
    return {a.id: r for a, r in zip(scenario.arms, results, strict=True)}

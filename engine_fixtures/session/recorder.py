"""``PerfRecorder``: what the ``perf_record`` / ``perf_invariant`` fixtures do with a test's measurements.

``perf_record(result) -> list[Verdict]``:
1. judges every metric of ``result`` against the scenario's pooled baseline (``judge.verdicts``);
2. records the result and its verdicts in the ``PerfSession`` (results JSON, reports, baseline updates);
3. attaches the verdict table as a report section, and a failure section if the test fails;
4. ends the test by its verdicts: any ``regression`` raises ``PerformanceRegression``; ``inconclusive``
   raises ``Inconclusive`` in strict mode (``--perf-strict``, on when ``CI`` is set) and skips with the
   noise it saw otherwise (never a pass); ``improvement`` raises ``StaleBaseline`` in strict mode (the
   baseline no longer describes the build and its promise is void until it is re-recorded); a result with
   nothing judged because this host has no pool (none at all, or only another host's) skips with the command
   that records one, on both tiers (a fresh runner's verdicts come from its same-run contrasts; a strict
   session that judged nothing at all fails at its end: ``PerfSession.nothing_judged``); a result whose pool is
   unreadable (``PerfSession.pool``) is recorded with its rows not judged and fails with ``BaselineError`` naming
   the file and the fix: only that row fails, the scenario's other rows and invariants still decide.
``perf_record.verdicts(result)`` judges without recording (the sequential runners use it to decide when to
stop). ``perf_record.diagnostic(result, why)`` records a result as report-only rows (a control arm whose
numbers measure the machine). ``perf_invariant(label, metric, reference, current, bound)`` judges a same-run
invariant, per round, and raises ``InvariantViolated`` when it is violated; ``perf_invariant.check(contrast)`` a
declared ``Contrast`` of the CPU tier's arms from the session's results.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from engine_fixtures.errors import (
    BaselineError,
    ConfigError,
    Inconclusive,
    InvariantViolated,
    MeasurementError,
    PerformanceRegression,
    StaleBaseline,
)
from engine_fixtures.judge.counters import judge_counter
from engine_fixtures.judge.decide import ALPHA
from engine_fixtures.judge.verdicts import Verdict, diagnostic, judge_invariant, judge_result
from engine_fixtures.options import resolve
from engine_fixtures.report.table import rows_for, terminal_table
from engine_fixtures.session.perf_session import PerfSession
from engine_fixtures.session.sections import add_on_failure
from engine_fixtures.store.baselines import UPDATE_HINT, Baseline, MissingBaseline
from engine_fixtures.store.results import RunResult

ALPHA_KEY = "alpha_per_look"  # RunResult.metadata: the per-look alpha its sequential runner decided at


def marker_floor(item: pytest.Item, default: float | None) -> float | None:
    """``perf(floor=...)``: ``5``, ``"5"`` or ``"5%"`` all mean 5 % (like --perf-floor)."""
    mark = item.get_closest_marker("perf")
    if mark is None or mark.kwargs.get("floor") is None:
        return default
    raw = mark.kwargs["floor"]
    if isinstance(raw, (int, float)) and not isinstance(raw, bool) and raw < 1:
        raise ConfigError(f"perf(floor={raw!r}) on {item.nodeid} would mean {raw}%: floors are in percent like "
                          f"--perf-floor; write perf(floor={raw * 100:g}) for {raw:.0%}")
    return resolve("floor", marker=(f"marker perf(floor=...) on {item.nodeid}", str(raw))).value


def expects_violation(item: pytest.Item) -> bool:
    """The test is a strict expected failure that applies here (``known_regression``): its invariant's regression is
    the known one, not a reason to refuse the run as a baseline."""
    mark = item.get_closest_marker("xfail")
    if mark is None or not mark.kwargs.get("strict", False):
        return False
    condition = mark.args[0] if mark.args else mark.kwargs.get("condition", True)
    return condition is True


def alpha_of(result: RunResult) -> float:
    return float(result.metadata.get(ALPHA_KEY, ALPHA))


def session_verdicts(session: PerfSession, result: RunResult, alpha: float | None = None,
                     floor: float | None = None) -> list[Verdict]:
    """``result`` judged against its pooled baseline in ``session``'s store (no test item needed: the sequential
    runners call it between looks). An unreadable pool judges nothing: its rows say so, and the looks go on."""
    base = session.pool(result.scenario)
    pool = base if isinstance(base, Baseline) else None
    verdicts = judge_result(result.samples, pool, scenario=result.scenario,
                            alpha=alpha_of(result) if alpha is None else alpha,
                            floor=session.settings.floor if floor is None else floor)
    if unreadable_of(base) is None:
        return verdicts
    return [replace(v, message=f"{v.metric}: not judged, its pool is unreadable") if v.status == "no-baseline" else v
            for v in verdicts]


def unreadable_of(base: Baseline | MissingBaseline) -> str | None:
    """Why ``base``'s pool cannot be read (None: it can, or there is none)."""
    return base.unreadable if isinstance(base, MissingBaseline) else None


class PerfRecorder:
    """The callable behind ``perf_record``."""

    def __init__(self, session: PerfSession, item: pytest.Item) -> None:
        self.session = session
        self.item = item

    def baseline(self, scenario: str) -> Baseline | MissingBaseline:
        return self.session.pool(scenario)

    @property
    def floor(self) -> float | None:
        return marker_floor(self.item, self.session.settings.floor)

    def verdicts(self, result: RunResult, alpha: float | None = None) -> list[Verdict]:
        """``result`` judged against its pooled baseline; nothing is recorded."""
        return session_verdicts(self.session, result, alpha, self.floor)

    def __call__(self, result: RunResult) -> list[Verdict]:
        __tracebackhide__ = True
        base = self.baseline(result.scenario)
        verdicts = self.verdicts(result)
        path = self.session.store.path_for(result.scenario)
        self.session.record(self.item.nodeid, result, verdicts, path if isinstance(base, Baseline) else None)
        self.finish(result.scenario, result.arm, verdicts, f"baseline {path}", kind="pool", pool=base,
                    profile=self.session.profiles.failure_text([result.scenario]))
        return verdicts

    def finish(self, scenario: str, arm: object, verdicts: Sequence[Verdict], where: str, *, kind: str,
               pool: Baseline | MissingBaseline | None = None, label: str = "", profile: str = "",
               judges: Sequence[str] = (), end: bool = True) -> None:
        """The one way a test ends by its rows: rows with no arm of their own (``kind`` "contrast" or "rows": a
        contrast's, an invariant's, a counter's, a figure's) are recorded here (a result's own rows were recorded with
        it; ``judges``: the measured scenarios whose run such a row judges), the table is attached as a report
        section, and the test ends by them (unless ``end`` is False: the caller ends it over several contrasts):
        ``conclude`` for rows against a pool, ``conclude_contrast`` for a contrast's; a figure's rows are report-only
        and end nothing."""
        __tracebackhide__ = True
        if kind != "pool":
            for v in verdicts:
                self.session.record_invariant(self.item.nodeid, scenario, v, judges, expects_violation(self.item))
        self.sections_for(scenario, arm, verdicts, where)
        if not end:
            return
        if kind == "contrast":
            conclude_contrast(label or scenario, verdicts, self.session.settings.strict, profile)
        elif kind == "pool":
            missing = pool.reason if isinstance(pool, MissingBaseline) else None
            conclude(scenario, verdicts, self.session.settings.strict, missing, profile=profile,
                     unreadable=unreadable_of(pool) if pool is not None else None)

    def diagnostic(self, result: RunResult, why: str) -> list[Verdict]:
        """Record ``result`` as report-only rows (e.g. a control arm: its numbers are the machine's speed)."""
        base = self.baseline(result.scenario)
        verdicts = [diagnostic(name, values, base.runs_for(name) if isinstance(base, Baseline) else (), why)
                    for name, values in result.samples.items()]
        self.session.record(self.item.nodeid, result, verdicts, None)
        self.sections_for(result.scenario, result.arm, verdicts, why)
        return verdicts

    def invariant(self, label: str, metric_name: str, reference: RunResult | Sequence[float],
                  current: RunResult | Sequence[float], bound: float, alpha: float | None = None) -> Verdict:
        __tracebackhide__ = True
        ref = _samples(reference, metric_name)
        cur = _samples(current, metric_name)
        if alpha is None:
            alphas = [alpha_of(x) for x in (reference, current) if isinstance(x, RunResult)]
            alpha = min(alphas) if alphas else ALPHA
        verdict = judge_invariant(label, metric_name, ref, cur, bound, alpha=alpha)
        scenario = current.scenario if isinstance(current, RunResult) else self.item.nodeid
        arms = tuple(dict.fromkeys(x.scenario for x in (current, reference) if isinstance(x, RunResult)))
        keys = [label, *(x.scenario for x in (reference, current) if isinstance(x, RunResult))]
        self.finish(scenario, {}, [verdict], "same-run invariant", kind="contrast", label=label, judges=arms,
                    profile=self.session.profiles.failure_text(keys))
        return verdict

    def sections_for(self, scenario: str, arm: object, verdicts: Sequence[Verdict], where: str) -> None:
        table = terminal_table(rows_for(scenario, arm if isinstance(arm, dict) else dict(arm), verdicts), width=110)
        self.item.add_report_section("call", "perf", f"{where}\n{table}")
        add_on_failure(self.item, "perf verdicts", lambda: table)


def _samples(x: RunResult | Sequence[float], name: str) -> Sequence[float]:
    if isinstance(x, RunResult):
        if name not in x.samples:
            raise KeyError(f"{x.scenario} has no samples for {name!r} (it has {sorted(x.samples)})")
        return x.samples[name]
    return x


INSTANCE_KEY = "window_instance"  # RunResult.metadata: the engine instance (an id) that served each window


def _inconclusive(strict: bool, text: str) -> None:
    __tracebackhide__ = True
    if strict:
        raise Inconclusive(text + "\n(strict mode: an undecided verdict fails; --perf-strict no only reports it)")
    pytest.skip(f"inconclusive, not a pass: {text}")


def _where(profile: str) -> str:
    """The differential profile's top 3 as the tail of a failure message ('' without one)."""
    return f"\n{profile}" if profile else ""


def conclude(scenario: str, verdicts: Sequence[Verdict], strict: bool, missing: str | None = None,
             where: str | Path = "", profile: str = "", unreadable: str | None = None) -> None:
    """End a test by its verdicts (see the module docstring); ``profile``: the top 3 of its differential profile,
    appended to a failure's message; ``unreadable``: why its pool cannot be read (the test fails on it)."""
    __tracebackhide__ = True
    if unreadable is not None:
        raise BaselineError(f"{scenario} is not judged (its result is recorded): {unreadable}")
    regressions = [v for v in verdicts if v.status == "regression"]
    if regressions:
        lines = "\n".join(f"  {v.message}" for v in regressions) + _where(profile)
        raise PerformanceRegression(f"performance regression in {scenario}:\n{lines}\nIf the change is intended, "
                                    "re-record the baseline: `perf-baseline update --from-runs 5 --accept REASON`")
    undecided = [v for v in verdicts if v.status == "inconclusive"]
    if undecided:
        _inconclusive(strict, f"{scenario}:\n" + "\n".join(f"  {v.message}" for v in undecided) + _where(profile))
    better = [v for v in verdicts if v.status == "improvement"]
    if better and strict:
        lines = "\n".join(f"  {v.message}" for v in better) + _where(profile)
        raise StaleBaseline(f"improvement in {scenario}: the baseline no longer describes this build, so a later "
                            f"regression back to the old level would pass unseen:\n{lines}\nRecord it: "
                            "`perf-baseline update --from-runs 5` (after the change has landed)")
    if not any(v.is_verdict for v in verdicts):
        building = next((v.message for v in verdicts if v.status == "no-baseline"), None)
        if missing is None and building is None:
            raise ConfigError(f"{scenario}: no metric of this result is judged (all are diagnostics); a number no "
                              "verdict reads is not a test: record it with perf_record.diagnostic(result, why)")
        pytest.skip(missing or f"{scenario}: {building}: {UPDATE_HINT}")


def conclude_contrast(label: str, verdicts: Sequence[Verdict], strict: bool, profile: str = "") -> None:
    """End a contrast's test (a group's, a CPU-tier invariant's, a counter's) by its rows: a violated row raises
    ``InvariantViolated`` (known upstream regressions are strict xfails on it), an undecided one is ``Inconclusive``
    in strict mode, and a contrast with no gating row measured on both sides is an error, never a pass."""
    __tracebackhide__ = True
    building = next((v.message for v in verdicts if v.status == "no-baseline"), None)
    if not any(v.is_verdict for v in verdicts) and building is not None:  # a fresh runner's A/B: its history grows
        pytest.skip(f"contrast {label}: {building}")
    if not any(v.is_verdict for v in verdicts):
        raise MeasurementError(f"contrast {label}: no gating metric was measured on both sides (rows: "
                               f"{', '.join(f'{v.metric} {v.status}' for v in verdicts) or 'none'})")
    violated = [v for v in verdicts if v.status == "regression"]
    if violated:
        lines = "".join(f"\n  {v.message}" for v in violated[1:])
        raise InvariantViolated(f"performance invariant violated: {violated[0].message}{lines}\n(contrast {label})"
                                f"{_where(profile)}")
    undecided = [v for v in verdicts if v.status == "inconclusive"]
    if undecided:
        _inconclusive(strict, f"contrast {label}:\n" + "\n".join(f"  {v.message}" for v in undecided) +
                      _where(profile))


class InvariantJudge:
    """The callable behind ``perf_invariant``; ``check(inv)`` judges a declared invariant from the session's
    results (``scenarios.registry``), skipping with the fix when an arm it needs was not measured."""

    def __init__(self, recorder: PerfRecorder, results: Any) -> None:
        self.recorder = recorder
        self.results = results

    def __call__(self, *args: Any, **kwargs: Any) -> Verdict:
        __tracebackhide__ = True
        return self.recorder.invariant(*args, **kwargs)

    def check(self, declared: Any) -> Verdict:
        """A ``Contrast`` of the CPU tier's arms (each of its metrics per round; the last row is returned) or a
        ``CounterBound``."""
        __tracebackhide__ = True
        if hasattr(declared, "limit"):
            return self.counter(declared)
        ref, cur = self.results.get(declared.reference), self.results.get(declared.candidate)
        rows = [self.recorder.invariant(declared.label, m, ref, cur, declared.bound_of(m)) for m in declared.metrics]
        return rows[-1]

    def counter(self, bound: Any) -> Verdict:
        """A ``CounterBound`` on the session's results of its arm (``judge.counters.judge_counter``)."""
        __tracebackhide__ = True
        result = self.results.get(bound.arm)
        values = _samples(result, bound.metric)
        verdict = judge_counter(bound.label, bound.metric, bound.arm, bound.kind, bound.limit, values,
                                len(result.metadata.get(INSTANCE_KEY) or values))
        self.recorder.finish(result.scenario, {}, [verdict], "counter invariant", kind="contrast",
                             label=bound.label, judges=(result.scenario,))
        return verdict

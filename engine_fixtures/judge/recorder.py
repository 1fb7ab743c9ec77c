"""``PerfRecorder``: what the ``perf_record`` and ``perf_invariant`` fixtures do with a test's results.

``PerfRecorder(session, item)(result) -> list[Verdict]`` (the ``perf_record`` fixture):
1. records ``result`` in the ``PerfSession`` (so ``--perf-update-baselines`` / ``perf-baseline
   update --from`` can turn it into a baseline, also when the test then skips or fails);
2. with no stored baseline: ``pytest.skip`` whose reason names the update command;
3. judges every metric against the baseline (tolerance: marker ``perf(tolerance=...)`` >
   ``--perf-tolerance`` > the metric registry), attaches a "perf" report section naming the baseline
   path, and ``pytest.fail`` listing every regression. ``unstable`` is reported, never a failure.
   ``.report(result, why)`` records and shows without judging (control arms).
Once it recorded anything, a failing test shows section "perf verdicts": the table of every verdict the
test recorded, results and invariants (``report.sections.add_on_failure``); the session's summary shows
every test's verdicts either way.
``.ratio(metric, reference, current, min_ratio, label="")`` (the ``perf_invariant`` fixture) judges a
cross-arm invariant (``gate.judge_ratio``), reports it and fails on a significant violation. ``reference``/``current``
are RunResults (their ``samples[metric]``) or sample sequences.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from engine_fixtures.errors import ConfigError
from engine_fixtures.judge.gate import Verdict, judge, judge_ratio
from engine_fixtures.judge.metrics import metric
from engine_fixtures.options import resolve
from engine_fixtures.report import sections
from engine_fixtures.report.session import PerfSession
from engine_fixtures.report.table import rows_for, terminal_table
from engine_fixtures.store.baselines import MissingBaseline
from engine_fixtures.store.results import RunResult


def marker_tolerance(item: pytest.Item, default: float | None) -> float | None:
    """``perf(tolerance=...)``: ``10``, ``"10"`` or ``"10%"`` all mean 10 % (like --perf-tolerance)."""
    mark = item.get_closest_marker("perf")
    if mark is None or mark.kwargs.get("tolerance") is None:
        return default
    raw = mark.kwargs["tolerance"]
    if isinstance(raw, (int, float)) and not isinstance(raw, bool) and raw < 1:
        raise ConfigError(f"perf(tolerance={raw!r}) on {item.nodeid} would mean {raw}%: tolerances are in "
                          f"percent like --perf-tolerance; write perf(tolerance={raw * 100:g}) for {raw:.0%}")
    return resolve("tolerance", marker=(f"marker perf(tolerance=...) on {item.nodeid}", str(raw))).value


def _samples(x: RunResult | Sequence[float], name: str) -> Sequence[float]:
    if isinstance(x, RunResult):
        if name not in x.samples:
            raise KeyError(f"{x.scenario} has no samples for {name!r} (it has {sorted(x.samples)})")
        return x.samples[name]
    return x


class PerfRecorder:
    """The callable behind ``perf_record``."""

    def __init__(self, session: PerfSession, item: pytest.Item) -> None:
        self.session = session
        self.item = item
        self._on_failure = False

    def _record(self, result: RunResult, verdicts: list[Verdict], baseline_path: Path | None) -> None:
        self.session.record(self.item.nodeid, result, verdicts, baseline_path)
        self._show_on_failure()

    def _show_on_failure(self) -> None:
        if not self._on_failure:
            sections.add_on_failure(self.item, "perf verdicts", self.verdict_table)
            self._on_failure = True

    def verdict_table(self) -> str:
        """Every verdict this test recorded (results and invariants), as the terminal table."""
        rows = [row for rec in self.session.records if rec.nodeid == self.item.nodeid
                for row in rows_for(rec.scenario, rec.arm, rec.verdicts)]
        return terminal_table(rows, width=110)

    def __call__(self, result: RunResult) -> list[Verdict]:
        settings = self.session.settings
        tolerance = marker_tolerance(self.item, settings.tolerance)
        if not settings.judge_baselines:
            return self.report(result, f"--perf-judge-baselines no from {settings.sources['judge_baselines']}")
        baseline = self.session.store.load(result.scenario)
        if isinstance(baseline, MissingBaseline):
            verdicts = [judge(name, None, values) for name, values in result.samples.items()]
            self._record(result, verdicts, None)
            self._section(baseline.path, "missing")
            pytest.skip(baseline.reason)
        verdicts = [judge(name, baseline.samples.get(name), values, tolerance)
                    for name, values in result.samples.items()]
        path = self.session.store.path_for(result.scenario)
        self._record(result, verdicts, path)
        self._section(path, "baseline")
        regressions = [v for v in verdicts if v.status == "regression"]
        if regressions:
            lines = "\n".join(f"  {v.message}" for v in regressions)
            pytest.fail(f"performance regression in {result.scenario} (baseline {path}):\n{lines}\n"
                        "If this change is intended, update the baseline with "
                        "`perf-baseline update --from <results.json>` or `pytest --perf-update-baselines`.",
                        pytrace=False)
        return verdicts

    def report(self, result: RunResult, why: str) -> list[Verdict]:
        """Record ``result`` and show it next to its baseline, judging nothing: for control arms whose absolute
        numbers measure the machine rather than the code (``why`` says which). Never skips, never fails."""
        baseline = self.session.store.load(result.scenario)
        base = {} if isinstance(baseline, MissingBaseline) else baseline.samples
        verdicts = []
        for name, values in result.samples.items():
            v = judge(name, base.get(name), values)
            verdicts.append(replace(v, status="report-only", p_value=None,
                                    message=f"{name}: reported, not judged ({why})"))
        self._record(result, verdicts, None)
        self._section(why, "report only")
        return verdicts

    def _section(self, path: object, label: str) -> None:
        """Where the judgement came from (the verdict table itself is the "perf verdicts" failure section)."""
        self.item.add_report_section("call", "perf", f"{label}: {path}")

    def ratio(self, metric_name: str, reference: RunResult | Sequence[float],
              current: RunResult | Sequence[float], min_ratio: float, label: str = "") -> Verdict:
        m = metric(metric_name)
        verdict = judge_ratio(m, _samples(reference, m.name), _samples(current, m.name), min_ratio, label)
        scenario = current.scenario if isinstance(current, RunResult) else self.item.nodeid
        self.session.record_invariant(self.item.nodeid, scenario, verdict)
        self._show_on_failure()
        self.item.add_report_section("call", "perf invariant", verdict.message)
        if verdict.status == "regression":
            pytest.fail(f"performance invariant violated: {verdict.message}", pytrace=False)
        return verdict

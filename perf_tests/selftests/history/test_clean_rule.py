"""The one clean-run rule (``store.clean``) and every site that asks it agree, on both back ends of the history.

The same runs (each mark, each outcome, and their mixes) are judged by the rule itself, by the history's
``clean_candidates`` (an SQL filter built from ``clean.MARKS``, then the rule per row), by ``last_clean_runs``
over the results files (the pools' ``refusal``), by ``SeriesPoint.clean``, and by the trend's "measured the build
as it is" (``judged_bad=True``, as ``validate`` asks it): each picks exactly the runs the rule calls clean.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import fields
from pathlib import Path

import pytest

from engine_fixtures.report.trend import trend
from engine_fixtures.store.clean import BAD_OUTCOMES, JUDGED, MARKS, is_clean, unclean
from engine_fixtures.store.history import HistoryStore, SeriesPoint, series_of
from engine_fixtures.store.history_schema import runs as runs_table
from engine_fixtures.store.results import OUTCOME_ORDER, ResultsFile, RunResult
from engine_fixtures.store.update import last_clean_runs

KEY = "clean-box"
A, B = "demo/a", "demo/b"  # B is measured by injected runs only: the history does not list it
HOST = {"gpu_uuids": [], "cpu_model": "clean CPU", "cpu_max_mhz": None, "kernel": "6.8.0", "runner": "clean-1"}
BASE = dt.datetime(2026, 3, 1, tzinfo=dt.timezone.utc)
# (outcome of A, injection, reference): every outcome with no mark, each mark alone and with a bad outcome
CASES = [(o, "", "") for o in (*OUTCOME_ORDER, "unjudged")] + [
    ("pass", "slow:torch=6", ""), ("pass", "", "patch:slow=1"), ("regression", "slow:torch=6", ""),
    ("inconclusive", "", "patch:slow=1"), ("pass", "slow:torch=6", "patch:slow=1"), ("improvement", "", ""),
    ("regression", "", ""), ("pass", "", ""),
]


def run(i: int, outcome: str, injection: str, reference: str) -> ResultsFile:
    samples = {"requests_per_s": (20.0 + 0.01 * i, 20.1, 19.9, 20.05)}
    results = [RunResult(A, {"c": "4"}, samples)] + ([RunResult(B, {"c": "8"}, samples)] if injection else [])
    verdicts = {A: {"requests_per_s": outcome}} if outcome != "unjudged" else {}
    when = (BASE + dt.timedelta(hours=i)).isoformat()
    return ResultsFile(tuple(results), KEY, {"host": HOST}, date=when, verdicts=verdicts, injection=injection,
                       reference=reference, run_id=f"{KEY}#{i}")


FILES = [run(i, *case) for i, case in enumerate(CASES)]


def expected(judged_bad: bool) -> list[str]:
    return [f.run_id for f in FILES if is_clean(f, f.outcome(A), judged_bad=judged_bad)]


def test_the_rule_names_what_fails_marks_first() -> None:
    assert set(BAD_OUTCOMES) < set(OUTCOME_ORDER)  # the outcomes ResultsFile.outcome can give
    for outcome in (*OUTCOME_ORDER, "unjudged"):
        bad = outcome in BAD_OUTCOMES
        assert unclean(FILES[0], outcome) == (JUDGED if bad else None)
        assert unclean(FILES[0], outcome, judged_bad=True) is None
        assert is_clean(FILES[0], outcome) is not bad
    both = run(0, "regression", "slow:torch=6", "patch:slow=1")
    assert [unclean(run(0, "regression", *marks), "regression", judged_bad=True)
            for marks in (("x", ""), ("", "y"))] == list(MARKS)
    assert unclean(both, "regression") == MARKS[0]
    assert unclean(both, "regression", judged_bad=True) == MARKS[0]  # a mark is never accepted


def test_the_marks_are_fields_of_every_kind_of_run_the_rule_is_asked_about() -> None:
    for cls in (ResultsFile, SeriesPoint):
        assert set(MARKS) <= {f.name for f in fields(cls)}, cls
    assert set(MARKS) <= set(runs_table.c.keys())  # the history's SQL filter is built from them


@pytest.mark.parametrize("judged_bad", [False, True])
def test_history_candidates_and_pool_choice_agree_with_the_rule(history_url: str, tmp_path: Path,
                                                                 judged_bad: bool) -> None:
    want = expected(judged_bad)
    assert 0 < len(want) < len(FILES)  # both kinds are there to tell apart
    store = HistoryStore.open(history_url, tmp_path)
    assert store is not None
    with store:
        for f in FILES:
            assert store.append(f)
        assert store.clean_candidates(KEY, len(FILES), judged_bad=judged_bad) == {A: want}
        newest = want[-3:]
        assert store.clean_candidates(KEY, 3, judged_bad=judged_bad) == {A: newest}
        accept = "looked at them" if judged_bad else None
        assert [f.run_id for f in last_clean_runs(FILES, KEY, len(FILES), accept=accept)[A]] == want
        assert [f.run_id for f in last_clean_runs(FILES, KEY, 3, accept=accept)[A]] == newest
        if not judged_bad:
            points = store.series(A, "requests_per_s", machine_key=KEY)[(KEY, A, "requests_per_s")]
            assert [p.run_id for p in points if p.clean] == want


def test_the_trend_levels_are_the_runs_that_measured_the_build_whatever_their_verdict() -> None:
    of_build = expected(judged_bad=True)
    assert of_build == [f.run_id for f in FILES if not f.injection and not f.reference]
    points = series_of(FILES, A, "requests_per_s")[(KEY, A, "requests_per_s")]
    assert [p.run_id for p in points if p.clean] == expected(judged_bad=False)
    t = trend(points)
    assert [p.run_id for p, level in zip(t.points, t.levels, strict=True) if level is not None] == of_build

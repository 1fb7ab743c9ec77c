"""HTML report: no degenerate one-point line plot; bars per arm exist for judged metrics."""

from __future__ import annotations

from engine_fixtures.judge.verdicts import judge_metric
from engine_fixtures.report.html import render_html
from engine_fixtures.report.table import rows_for
from engine_fixtures.store.results import ResultsFile, RunResult


def result(c: int, rps: float) -> RunResult:
    return RunResult(f"engine/x=1/c={c}", {"x": "1", "c": str(c)}, {"requests_per_s": (rps, rps * 1.01, rps * 0.99)})


def test_one_concurrency_point_draws_bars_not_a_line() -> None:
    r = result(16, 30.0)
    rows = rows_for(r.scenario, r.arm, [judge_metric("requests_per_s", [(30.0, 30.2), (29.8, 30.1), (30.3, 30.0)],
                                                     r.samples["requests_per_s"])])
    page = render_html(ResultsFile((r,), "m"), rows)
    assert "requests_per_s vs concurrency" not in page
    assert "requests_per_s per arm" in page
    assert "<td>pass</td>" in page


def test_two_concurrency_points_draw_the_line() -> None:
    page = render_html(ResultsFile((result(4, 10.0), result(16, 30.0)), "m"), [])
    assert "requests_per_s vs concurrency" in page

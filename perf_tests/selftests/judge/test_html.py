"""HTML report: no degenerate one-point line plot; bars per arm exist for judged metrics."""

from __future__ import annotations

import pytest

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


def test_the_report_leads_with_each_scenarios_promise_and_the_ab_blocks() -> None:
    """Issue 19: one forest plot per scenario (change, interval, threshold, promise), per-block A/B ratios."""
    from engine_fixtures.report.forest import ab_pairs, ab_ratios, forest

    pool = [(30.0, 30.2, 29.9), (29.8, 30.1, 30.0), (30.3, 30.0, 30.1), (30.1, 29.9, 30.2), (29.9, 30.0, 30.3)]
    r = result(16, 30.0)
    v = judge_metric("requests_per_s", pool, r.samples["requests_per_s"])
    page = render_html(ResultsFile((r,), "m"), rows_for(r.scenario, r.arm, [v]))
    assert page.index("what engine/x=1/c=16 promises") < page.index("<table")
    fig = forest(r.scenario, [v])
    ax = fig.axes[0]
    drawn = sorted(x for line in ax.lines for x in line.get_xdata())
    assert 100 * v.detectable in drawn  # the promise
    assert v.excludes == v.detectable  # a history row has no bound: what it catches is what a pass excludes
    assert 100 * v.flags in drawn  # the threshold
    assert [t.get_text() for t in ax.get_yticklabels()] == ["requests_per_s"]
    assert forest(r.scenario, []) is None

    ref = RunResult("engine/x=1/c=16/build=reference", {"x": "1"}, {"requests_per_s": (30.0, 30.0, 31.0, 31.0)})
    cand = RunResult("engine/x=1/c=16", {"x": "1"}, {"requests_per_s": (33.0, 33.0, 31.0, 31.0)})
    assert ab_pairs([cand, ref]) == [(cand, ref)]
    (line, *_) = ab_ratios(cand, ref).axes[0].lines
    assert list(line.get_ydata()) == pytest.approx([1.1, 1.0])  # block 1: 33/30, block 2: 31/31
    assert "A/B per block" in render_html(ResultsFile((cand, ref), "m"), [])


def test_a_bounded_contrasts_diamond_is_what_a_pass_excludes_and_its_text_what_it_catches() -> None:
    """The forest's axis is the change against the reference: the diamond sits at D (``excludes``), the text says
    the row's ``catches`` (beyond the 0.9x bound), as the table does."""
    import math

    from engine_fixtures.judge.paired import judge_contrast
    from engine_fixtures.report.forest import forest

    effects = [math.log(0.95) + e for e in (0.01, -0.01, 0.0, 0.005, -0.005, 0.0)]
    v = judge_contrast("stock vs buffer", "requests_per_s", [20.0] * 6, [19.0] * 6, effects, bound=0.9, budget=15)
    ax = forest("live/g: stock vs buffer", [v]).axes[0]
    drawn = [x for line in ax.lines for x in line.get_xdata()]
    assert 100 * v.excludes in drawn
    assert 100 * v.detectable not in drawn
    assert [t.get_text() for t in ax.texts] == [f"pass -5.0%, catches {100 * v.detectable:.0f}% beyond the bound"]


def test_ab_blocks_take_each_windows_block_and_a_per_segment_value_once() -> None:
    """A per-segment metric (one value per visit, on its first window) is put in its window's block, never read as
    the windows ``2i, 2i+1``."""
    from engine_fixtures.report.forest import ab_ratios

    meta = {"window_block": [0, 0, 1, 1], "sample_windows": {"rebuild_ms_per_image": [0, 2]}}
    ref = RunResult("engine/x=1/c=16/build=reference", {"x": "1"},
                    {"requests_per_s": (30.0, 30.0, 31.0, 31.0), "rebuild_ms_per_image": (2.0, 3.0)}, metadata=meta)
    cand = RunResult("engine/x=1/c=16", {"x": "1"},
                     {"requests_per_s": (33.0, 33.0, 31.0, 31.0), "rebuild_ms_per_image": (2.2, 3.0)}, metadata=meta)
    lines = {line.get_label(): list(line.get_ydata()) for line in
             ab_ratios(cand, ref, ("requests_per_s", "rebuild_ms_per_image")).axes[0].lines}
    assert lines["requests_per_s"] == pytest.approx([1.1, 1.0])
    assert lines["rebuild_ms_per_image"] == pytest.approx([1.1, 1.0])


def test_a_known_regressions_row_says_so_in_every_table() -> None:
    """A green run's known upstream regression (a strict xfail's expected violation) reads as such, never as a bare
    `regression` beside the passes; an unexpected regression keeps its word."""
    from dataclasses import replace

    from engine_fixtures.report.table import KNOWN, markdown, terminal_table

    v = replace(judge_metric("requests_per_s", [(10.0, 10.1), (9.9, 10.2), (10.1, 10.0)], [6.0, 6.1, 5.9]),
                status="regression")
    known, plain = rows_for("live/cpu: stock >= 0.9x buffer", {}, [v], known=True), rows_for("other", {}, [v])
    assert known[0].cells()[-1] == KNOWN == "regression (known: xfail)"
    assert plain[0].cells()[-1] == "regression"
    assert KNOWN in terminal_table(known)
    assert markdown(known + plain).splitlines()[2] == f"1 regression, 1 {KNOWN}"

"""End-to-end through pytest: perf_record skips without a baseline, updates, passes, fails on regression."""

from __future__ import annotations

import json

import pytest

from engine_fixtures.machine import MachineInfo

pytest_plugins = ("pytester",)

TEST_FILE = """
import os
import pytest
from engine_fixtures.store.results import RunResult

SHIFT = float(os.environ.get("SHIFT", "1.0"))
BASE = (100.0, 101.0, 99.0, 100.5, 99.5)

@pytest.mark.perf(tolerance=10)
def test_demo(perf_record):
    perf_record(RunResult("demo/arm=a/c=4", {"arm": "a", "c": "4"},
                          {"latency_p50_ms": tuple(v * SHIFT for v in BASE),
                           "requests_per_s": tuple(1000.0 / v for v in BASE)}))

def test_invariant(perf_invariant):
    perf_invariant("requests_per_s", [10.0, 10.1, 9.9], [x / SHIFT for x in (10.0, 10.1, 9.9)], 0.95)
"""


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_demo=TEST_FILE)
    return pytester


def run(p: pytest.Pytester, *args: str) -> pytest.RunResult:
    return p.runpytest("-rs", "--perf-baseline-dir", str(p.path / "bl"),
                                  "--perf-results-dir", str(p.path / "out"), *args)


def test_missing_then_update_then_pass_then_regression(suite: pytest.Pytester,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    r = run(suite)
    r.assert_outcomes(skipped=1, passed=1)
    r.stdout.fnmatch_lines(["*perf summary*", "*no-basel*",
                            "*no baseline for 'demo/arm=a/c=4'*perf-baseline update --from*"])
    assert not (suite.path / "bl").exists()
    results = sorted((suite.path / "out").glob("results-*.json"))
    assert len(results) == 1
    assert json.loads(results[0].read_text())["results"][0]["scenario"] == "demo/arm=a/c=4"
    assert (suite.path / "out" / "report.html").stat().st_size > 0
    assert "| scenario |" in (suite.path / "out" / "summary.md").read_text()

    r = run(suite, "--perf-update-baselines")
    r.assert_outcomes(skipped=1, passed=1)
    r.stdout.fnmatch_lines(["*updated baseline*demo%2Farm=a%2Fc=4.json"])
    written = list((suite.path / "bl").glob("*/demo%2Farm=a%2Fc=4.json"))
    assert len(written) == 1, written
    assert written[0].parent.name == MachineInfo.collect().key

    run(suite).assert_outcomes(passed=2)

    monkeypatch.setenv("SHIFT", "1.5")
    r = run(suite)
    r.assert_outcomes(failed=2)
    r.stdout.fnmatch_lines(["performance regression in demo/arm=a/c=4*",
                            "  latency_p50_ms: 100 -> 150 ms (+50.0%): worse than the 10% tolerance*",
                            "*perf-baseline update --from*",
                            "performance invariant violated: requests_per_s ratio: 0.667x*"])
    table = (suite.path / "out" / "summary.md").read_text().split("| scenario |")[1]
    assert table.index("| regression |") < table.index("| report-only |") if "report-only" in table else True


def test_failing_perf_test_shows_its_verdict_table_section(suite: pytest.Pytester,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A failing perf_record test carries section "perf verdicts" (the table of its verdicts); a passing one
    does not (report.sections.add_on_failure)."""
    run(suite, "--perf-update-baselines").assert_outcomes(skipped=1, passed=1)
    r = run(suite, "-rA")
    r.assert_outcomes(passed=2)
    assert "- perf verdicts -" not in r.stdout.str()
    monkeypatch.setenv("SHIFT", "1.5")
    r = run(suite)
    r.assert_outcomes(failed=2)
    r.stdout.fnmatch_lines(["*_ test_demo _*", "*- perf verdicts -*",
                            "*demo/arm=a/c=4*latency_p50_ms*150 ms*+50.0%*regression*",
                            "*_ test_invariant _*", "*- perf verdicts -*", "*requests_per_s*regression*"])


def test_github_step_summary_is_appended(suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    step = suite.path / "step.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    run(suite).assert_outcomes(skipped=1, passed=1)
    assert "## Performance verdicts" in step.read_text()


def test_marker_tolerance_below_one_is_rejected(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest
        from engine_fixtures.store.results import RunResult

        @pytest.mark.perf(tolerance=0.1)
        def test_t(perf_record):
            perf_record(RunResult("s", {}, {"requests_per_s": (1.0, 1.0, 1.0)}))
    """)
    r = run(pytester)
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["*perf(tolerance=10)*"])


REPORT_FILE = """
import os
from engine_fixtures.store.results import RunResult

SHIFT = float(os.environ.get("SHIFT", "1.0"))

def test_control(perf_record):
    verdicts = perf_record.report(RunResult("demo/control", {"arm": "control"},
                                            {"latency_p50_ms": tuple(v * SHIFT for v in (100.0, 101.0, 99.0))}),
                                  "a control arm")
    assert [v.status for v in verdicts] == ["report-only"]
"""


def test_report_records_and_shows_the_baseline_but_never_judges(pytester: pytest.Pytester,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_control=REPORT_FILE)
    run(pytester, "--perf-update-baselines").assert_outcomes(passed=1)
    monkeypatch.setenv("SHIFT", "3.0")  # a 3x slowdown: perf_record would fail, report must not
    r = run(pytester)
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(["*demo/control*latency_p50_ms*300 ms*100*+200.0%*report-only*"])

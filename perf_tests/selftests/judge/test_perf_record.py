"""End to end through pytest: a fresh machine skips with the command, three runs build the pool, then the
verdicts end the tests: pass, regression (fails), inconclusive (fails in strict mode, skips otherwise, never
passes), improvement (fails in strict mode); guarded updates; sections on failure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine_fixtures.machine import MachineInfo

pytest_plugins = ("pytester",)

TEST_FILE = """
import os
import numpy as np
import pytest
from engine_fixtures.store.results import RunResult

SHIFT = float(os.environ.get("SHIFT", "1.0"))
NOISE = float(os.environ.get("NOISE", "0.01"))
RUN = int(os.environ.get("RUN", "0"))

def windows(level, n=6):
    rng = np.random.default_rng(RUN)
    run_level = level * (1 + 0.01 * rng.standard_normal())
    return tuple(float(v) for v in run_level * (1 + NOISE * rng.standard_normal(n)))

@pytest.mark.perf
def test_demo(perf_record):
    perf_record(RunResult("demo/arm=a/c=4", {"arm": "a", "c": "4"},
                          {"latency_p50_ms": windows(100.0 * SHIFT), "achieved_concurrency": (4.0,) * 6}))

def test_invariant(perf_invariant):
    torch_arm = [10.0, 10.1, 9.9, 10.05]
    perf_invariant("buffer/torch", "requests_per_s", torch_arm, [x * 1.2 / SHIFT for x in torch_arm], 1.05)
"""


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    pytester.makepyfile(test_demo=TEST_FILE)
    monkeypatch.setenv("PERF_STRICT", "yes")
    return pytester


def run(p: pytest.Pytester, *args: str) -> pytest.RunResult:
    return p.runpytest("-rs", "--perf-baseline-dir", str(p.path / "bl"), "--perf-results-dir", str(p.path / "out"),
                       *args)


def build_pool(p: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, runs: int = 3) -> None:
    for i in range(1, runs + 1):
        monkeypatch.setenv("RUN", str(i))
        run(p, "--perf-update-baselines").assert_outcomes(skipped=1, passed=1)
    monkeypatch.setenv("RUN", "100")


def test_fresh_machine_skips_with_the_command_then_three_runs_make_a_baseline(
        suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    r = run(suite)
    r.assert_outcomes(skipped=1, passed=1)  # the invariant still gives this box a verdict
    r.stdout.fnmatch_lines(["*no baseline for 'demo/arm=a/c=4'*perf-baseline update --from-runs 5*"])
    assert not (suite.path / "bl").exists()
    assert (suite.path / "out" / "report.html").stat().st_size > 0
    results = sorted((suite.path / "out").glob("results-*.json"))
    assert json.loads(results[0].read_text())["verdicts"]["demo/arm=a/c=4"]["latency_p50_ms"] == "no-baseline"

    monkeypatch.setenv("RUN", "1")
    r = run(suite, "--perf-update-baselines")
    r.stdout.fnmatch_lines(["*baseline*demo%2Farm=a%2Fc=4.json: +1 run(s)*"])
    monkeypatch.setenv("RUN", "2")
    r = run(suite, "--perf-update-baselines")
    r.assert_outcomes(skipped=1, passed=1)
    r.stdout.fnmatch_lines(["*pools 1 run(s) and judges from 3; add 2 more*"])
    monkeypatch.setenv("RUN", "3")
    run(suite, "--perf-update-baselines").assert_outcomes(skipped=1, passed=1)
    (written,) = (suite.path / "bl").glob("*/demo%2Farm=a%2Fc=4.json")
    assert written.parent.name == MachineInfo.collect().key
    assert len(json.loads(written.read_text())["runs"]) == 3

    monkeypatch.setenv("RUN", "4")
    r = run(suite)
    r.assert_outcomes(passed=2)
    r.stdout.fnmatch_lines(["*latency_p50_ms*3 runs*pass*"])


def test_a_slowdown_is_a_regression_and_the_failure_shows_the_verdict_table(
        suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    build_pool(suite, monkeypatch)
    monkeypatch.setenv("SHIFT", "1.3")
    r = run(suite)
    r.assert_outcomes(failed=2)
    r.stdout.fnmatch_lines(["*PerformanceRegression: performance regression in demo/arm=a/c=4*",
                            "*latency_p50_ms: * -> * ms (+*%): regression*",
                            "*InvariantViolated: performance invariant violated: requests_per_s ratio buffer/torch*",
                            "*- perf verdicts -*"])
    table = (suite.path / "out" / "summary.md").read_text().split("| scenario |")[1]
    assert table.index("| regression |") < table.index("| report-only |")
    # a regressed run is not pooled without a reason
    r = run(suite, "--perf-update-baselines")
    r.stdout.fnmatch_lines(["*refused*judged regression (latency_p50_ms); record it only with --accept REASON*"])


def test_inconclusive_fails_in_strict_mode_and_skips_otherwise_never_passes(
        suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    build_pool(suite, monkeypatch)
    monkeypatch.setenv("NOISE", "0.5")  # this run is far noisier than the pool's runs
    monkeypatch.setenv("SHIFT", "1.06")
    r = run(suite, "-k", "not invariant")
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["*Inconclusive: demo/arm=a/c=4:*", "*noisier than its baseline's runs*",
                            "*strict mode*"])
    r = run(suite, "-k", "not invariant", "--perf-strict", "no")
    r.assert_outcomes(skipped=1)
    r.stdout.fnmatch_lines(["*inconclusive, not a pass*"])


def test_an_improvement_fails_strict_mode_because_the_baseline_is_stale(
        suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    build_pool(suite, monkeypatch)
    monkeypatch.setenv("SHIFT", "0.7")
    r = run(suite, "-k", "not invariant")
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["*StaleBaseline: improvement in demo/arm=a/c=4*"])
    run(suite, "-k", "not invariant", "--perf-strict", "no").assert_outcomes(passed=1)


def test_failing_perf_test_shows_its_verdict_table_section(suite: pytest.Pytester,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A failing perf_record test carries section "perf verdicts" (the table of its verdicts); a passing one
    does not (report.sections.add_on_failure)."""
    build_pool(suite, monkeypatch)
    r = run(suite, "-rA")
    r.assert_outcomes(passed=2)
    assert "- perf verdicts -" not in r.stdout.str()
    monkeypatch.setenv("SHIFT", "1.5")
    r = run(suite)
    r.assert_outcomes(failed=2)
    r.stdout.fnmatch_lines(["*_ test_demo _*", "*- perf verdicts -*",
                            "*demo/arm=a/c=4*latency_p50_ms*regression*",
                            "*_ test_invariant _*", "*- perf verdicts -*", "*requests_per_s*regression*"])


def test_github_step_summary_is_appended(suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    step = suite.path / "step.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    run(suite).assert_outcomes(skipped=1, passed=1)
    assert "## Performance verdicts" in step.read_text()


def test_marker_floor_below_one_is_rejected(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest
        from engine_fixtures.store.results import RunResult

        @pytest.mark.perf(floor=0.1)
        def test_t(perf_record):
            perf_record(RunResult("s", {}, {"requests_per_s": (1.0, 1.0, 1.0)}))
    """)
    r = run(pytester)
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["*perf(floor=10)*"])


def test_a_result_with_nothing_judged_is_a_usage_error_not_a_pass(pytester: pytest.Pytester, tmp_path: Path) -> None:
    pytester.makepyfile("""
        from engine_fixtures.store.results import RunResult

        def test_t(perf_record):
            perf_record(RunResult("s", {}, {"throttled_periods": (1.0, 2.0)}))

        def test_control(perf_record):
            rows = perf_record.diagnostic(RunResult("c", {}, {"requests_per_s": (1.0, 2.0)}), "the yardstick")
            assert [v.status for v in rows] == ["report-only"]
    """)
    bl = pytester.path / "bl" / MachineInfo.collect().key
    bl.mkdir(parents=True)
    (bl / "s.json").write_text(json.dumps({"format_version": 3, "scenario": "s", "arm": {}, "machine_key": bl.name,
                                           "host": MachineInfo.collect().host.to_json(),
                                           "runs": [{"run_id": "r", "samples": {"throttled_periods": [1.0]}}]}))
    r = run(pytester)
    r.assert_outcomes(failed=1, passed=1)
    r.stdout.fnmatch_lines(["*no metric of this result is judged*perf_record.diagnostic*"])


GPU_FILE = """
import pytest
from engine_fixtures.store.results import RunResult

def result(copy):
    return RunResult(f"engine/transport=cpu/copy={copy}/c=16", {"copy": copy},
                     {"requests_per_s": (30.0, 31.0, 30.5), "tpot_p50_ms": (3.0, 3.1, 3.05)})

@pytest.mark.perf  # an engine/ scenario id is the GPU tier's (the gpu_tier marker would skip without SGLang)
@pytest.mark.parametrize("copy", ["buffer", "stock"])
def test_arm(perf_record, copy):
    perf_record(result(copy))
"""


def test_a_gpu_tier_arm_without_a_pool_skips_and_a_strict_session_that_judged_nothing_fails(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh runner: every arm says no-baseline (a skip naming the command), since its verdicts come from the
    same-run contrasts; but a strict session in which not one row was a verdict is not green."""
    pytester.makepyfile(test_gpu=GPU_FILE)
    monkeypatch.setenv("PERF_STRICT", "yes")
    monkeypatch.setenv("PERF_HISTORY_URL", "none")  # in-process sessions; the history is not under test
    r = run(pytester)
    r.assert_outcomes(skipped=2)
    assert r.ret == pytest.ExitCode.TESTS_FAILED
    # pytest's short summary (the skip reasons), then the suite's summary: the run ends on the verdicts
    r.stdout.fnmatch_lines(["*no baseline for 'engine/transport=cpu/copy=buffer/c=16'*perf-baseline update*",
                            "*perf summary*",
                            "*perf: FAILED: strict mode: this session measured 2 scenario(s) and judged none "
                            "(4 no-baseline)*--perf-allow-missing-baselines*",
                            "*performance verdicts*"])
    assert "FAILED: strict mode" in (pytester.path / "out" / "summary.md").read_text()
    assert run(pytester, "--perf-allow-missing-baselines").ret == pytest.ExitCode.OK
    monkeypatch.setenv("PERF_STRICT", "no")
    r = run(pytester)
    r.assert_outcomes(skipped=2)
    assert r.ret == pytest.ExitCode.OK


def test_a_strict_session_with_one_verdict_is_judged(suite: pytest.Pytester) -> None:
    r = run(suite)  # the pool-less arm skips; the same-run invariant decides
    r.assert_outcomes(skipped=1, passed=1)
    assert r.ret == pytest.ExitCode.OK
    assert "judged none" not in r.stdout.str()


def test_a_pool_of_another_host_is_no_baseline_and_its_own_host_is_judged(
        suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """The key (CPU model, CPUs, quota, GPU model and count) cannot tell two hosts apart: the pool's host can.
    On a GPU-less box the host is the runner label (RUNNER_NAME) and the CPU model."""
    monkeypatch.setenv("RUNNER_NAME", "runner-a")
    build_pool(suite, monkeypatch)
    monkeypatch.setenv("RUNNER_NAME", "runner-b")
    r = run(suite, "-k", "not invariant")
    r.assert_outcomes(skipped=1)
    assert r.ret == pytest.ExitCode.TESTS_FAILED  # strict, and nothing judged
    if MachineInfo.collect().gpus:
        return  # a GPU box: the host is its GPU UUIDs, which RUNNER_NAME does not change
    r.stdout.fnmatch_lines(["*no baseline for 'demo/arm=a/c=4' on this host: the pool at * was recorded on "
                            "another host, runner-a (no GPU;*, and this host is runner-b (no GPU;*"])
    monkeypatch.setenv("RUNNER_NAME", "runner-a")
    r = run(suite, "-k", "not invariant")
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(["*latency_p50_ms*3 runs*pass*"])


def test_require_gpu_stops_a_run_where_nvml_sees_no_gpu(pytester: pytest.Pytester) -> None:
    from engine_fixtures.session.marks import require_gpu_problem

    problem = require_gpu_problem(1)
    if problem is None:
        pytest.skip("this machine has a GPU and SGLang: --perf-require-gpu 1 holds here")
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    r = run(pytester, "--perf-require-gpu", "1")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(["*--perf-require-gpu 1:*drop --perf-require-gpu*"])


def test_a_cpu_quota_number_is_refused_on_the_cpu_tier(pytester: pytest.Pytester) -> None:
    """Issue 19 item 8: --perf-cpu-quota 2 was silently ignored by the mechanism arms."""
    pytester.makepyfile(test_m="import pytest\n\n@pytest.mark.cpu_tier\ndef test_m():\n    pass\n")
    r = run(pytester, "--perf-cpu-quota", "2")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(["*--perf-cpu-quota 2 (from command line --perf-cpu-quota)*would silently ignore it*"])
    run(pytester, "--perf-cpu-quota", "none").assert_outcomes(passed=1)



def test_a_gpu_tier_option_is_refused_where_only_the_cpu_tier_runs(pytester: pytest.Pytester) -> None:
    """Issue 37, case 5: --perf-model on the CPU tier was silently ignored; refused like --perf-cpu-quota CORES, by
    the same check, unless a GPU-tier test is selected to read it."""
    pytester.makepyfile(test_m="import pytest\n\n@pytest.mark.cpu_tier\ndef test_m():\n    pass\n")
    model = str(pytester.path / "model")
    r = run(pytester, "--perf-model", model, "--perf-model-shape", "tiny")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines([f"*--perf-model {model} (from command line --perf-model), --perf-model-shape tiny (from "
                            "command line --perf-model-shape): GPU-tier option(s), for the engine, and this session "
                            "selects CPU-tier tests only, which would silently ignore them*"])
    pytester.makepyfile(test_g="import pytest\n\n@pytest.mark.gpu_tier\ndef test_g():\n    pass\n")
    assert run(pytester, "--perf-model", model).ret == pytest.ExitCode.OK  # a GPU-tier test reads it

INVARIANTS_FILE = """
import pytest
from engine_fixtures.errors import InvariantViolated
from engine_fixtures.store.results import RunResult

A = RunResult("inv/arm=a", {"arm": "a"}, {"requests_per_s": (10.0, 12.0, 9.0, 11.5, 8.5)})
B = RunResult("inv/arm=b", {"arm": "b"}, {"requests_per_s": (10.5, 9.0, 12.0, 9.5, 11.0)})
C = RunResult("inv/arm=c", {"arm": "c"}, {"requests_per_s": (5.0, 6.0, 4.5, 5.75, 4.25)})

@pytest.mark.perf
@pytest.mark.parametrize("result", [A, B, C], ids=["a", "b", "c"])
def test_arm(perf_record, result):
    perf_record(result)

@pytest.mark.perf
def test_undecided(perf_invariant):
    perf_invariant("b >= a", "requests_per_s", A, B, 1.0)

@pytest.mark.perf
@pytest.mark.xfail(True, strict=True, raises=InvariantViolated, reason="a known regression")
def test_known(perf_invariant):
    perf_invariant("c >= a", "requests_per_s", A, C, 1.0)
"""


def test_a_run_whose_invariant_was_inconclusive_is_refused_as_a_baseline(pytester: pytest.Pytester) -> None:
    """Issue 28, case 8: such a run was pooled without --accept (the invariant's verdict was not the arms')."""
    pytester.makepyfile(test_inv=INVARIANTS_FILE)
    r = run(pytester, "--perf-strict", "no", "--perf-update-baselines")
    r.assert_outcomes(skipped=4, xfailed=1)
    (results,) = (pytester.path / "out").glob("results-*.json")
    verdicts = json.loads(results.read_text())["verdicts"]
    assert verdicts["inv/arm=a"] == {"requests_per_s": "no-baseline", "requests_per_s ratio b >= a": "inconclusive",
                                     "requests_per_s ratio c >= a": "xfail"}
    assert verdicts["inv/arm=b"]["requests_per_s ratio b >= a"] == "inconclusive"
    assert verdicts["inv/arm=c"]["requests_per_s ratio c >= a"] == "xfail"  # the known regression refuses nothing
    r.stdout.fnmatch_lines(["*refused*inv/arm=a was judged inconclusive (requests_per_s ratio b >= a); record it "
                            "only with --accept REASON*"])
    assert sorted(p.name for p in (pytester.path / "bl").glob("*/*.json")) == ["inv%2Farm=c.json"]

"""Verdict rows: every judged metric ends in one of four verdicts; diagnostics and missing baselines are labelled."""

from __future__ import annotations

import math

import pytest

from engine_fixtures.errors import MeasurementError
from engine_fixtures.judge.decide import NullSample
from engine_fixtures.judge.metrics import metric
from engine_fixtures.judge.verdicts import judge_contrast, judge_invariant, judge_metric, judge_result


class Pool:
    def __init__(self, runs: dict[str, list[tuple[float, ...]]]) -> None:
        self.runs = runs

    def runs_for(self, name: str) -> list[tuple[float, ...]]:
        return self.runs.get(name, [])

    def metric_names(self) -> list[str]:
        return sorted(self.runs)


RPS = [(20.0, 20.4, 19.8, 20.1), (19.5, 19.9, 19.6, 19.7), (20.6, 20.2, 20.5, 20.3), (20.0, 19.9, 20.2, 20.1)]


def test_pass_regression_and_improvement_in_the_metrics_direction() -> None:
    same = judge_metric("requests_per_s", RPS, [20.1, 20.0, 19.9, 20.2])
    assert same.status == "pass"
    assert same.runs == 4
    assert same.detectable is not None
    assert 0 < same.detectable < 0.5
    assert judge_metric("requests_per_s", RPS, [14.0, 14.2, 13.9, 14.1]).status == "regression"
    assert judge_metric("requests_per_s", RPS, [28.0, 28.2, 27.9, 28.1]).status == "improvement"
    lat = [tuple(1000 / v for v in r) for r in RPS]
    assert judge_metric("latency_p50_ms", lat, [70.0, 71.0, 70.5, 70.2]).status == "regression"


def test_no_baseline_and_one_run_baselines_are_not_passes() -> None:
    assert judge_metric("requests_per_s", [], [20.0, 20.1]).status == "no-baseline"
    one = judge_metric("requests_per_s", RPS[:1], [20.0, 20.1, 19.9])
    assert one.status == "no-baseline"  # a pool still being built
    assert "pools 1 run(s) and judges from 3; add 2 more" in one.message


def test_zero_windows_is_an_error_never_a_zero() -> None:
    with pytest.raises(MeasurementError, match="no windows"):
        judge_metric("ttft_p50_ms", RPS, [])


def test_result_diagnostics_missing_metrics_and_gpu_busy_as_a_level() -> None:
    """Issue 46: GPU busy gates between arms of one build (rel.*), so as a level against a pool it is a report-only
    row that says why; the poll beside it never gates."""
    pool = Pool({"requests_per_s": RPS, "throttled_periods": [(3.0, 4.0)] * 4,
                 "gpu_util_buffer_mean": [(45.0, 46.0, 45.5)] * 4, "gpu_util_mean": [(45.0, 46.0, 45.5)] * 4})
    rows = judge_result({"requests_per_s": (20.0, 20.1, 19.9), "throttled_periods": (3.0, 3.0),
                         "gpu_util_buffer_mean": (30.2, 30.4, 30.0), "gpu_util_mean": (30.2, 30.4, 30.0)},
                        pool, scenario="s")
    by = {v.metric: v for v in rows}
    assert by["requests_per_s"].status == "pass"
    assert by["requests_per_s"].is_verdict
    assert by["throttled_periods"].status == "report-only"
    assert by["gpu_util_buffer_mean"].status == "report-only"
    assert "a build whose kernels got faster would read as starved" in by["gpu_util_buffer_mean"].message
    assert by["gpu_util_mean"].status == "report-only"
    assert "not a gate of this scenario" in by["gpu_util_mean"].message
    with pytest.raises(MeasurementError, match="baseline judges 'requests_per_s' but this run did not measure it"):
        judge_result({"throttled_periods": (3.0,)}, pool, scenario="s")


def test_a_live_arms_gpu_busy_ratio_gates_against_its_pool() -> None:
    """A live arm's GPU busy over its control's in the same blocks (rel.*) is judged against its pool: a starved
    GPU at the same load is a regression."""
    pool = Pool({"rel.gpu_util_buffer_mean": [(1.00, 0.99, 1.01), (1.01, 1.00, 0.99), (0.99, 1.00, 1.01)]})
    (v,) = judge_result({"rel.gpu_util_buffer_mean": (0.72, 0.71, 0.73)}, pool, scenario="s/copy=stock")
    assert (v.status, v.scale, v.gating) == ("regression", "log", True)
    assert v.delta == pytest.approx(0.72 - 1.0, abs=0.01)


def test_paired_invariant_holds_fails_and_straddles() -> None:
    torch_rps = [12.0, 12.5, 11.8, 12.2, 12.1]
    holds = judge_invariant("buffer/torch", "requests_per_s", torch_rps, [v * 1.2 for v in torch_rps], 1.05)
    assert holds.status == "pass"
    forced = judge_invariant("buffer/torch", "requests_per_s", torch_rps, [v * 1.0 for v in torch_rps], 1.05)
    assert forced.status == "regression"
    assert "invariant violated" in forced.message
    with pytest.raises(ValueError, match="one window of each per round"):
        judge_invariant("x", "requests_per_s", [1.0, 2.0], [1.0], 1.0)


def test_a_metric_only_a_one_run_pool_has_is_gone_without_an_error() -> None:
    """Issue 19 item 6: the committed quota=4 pools are one run with cpu_share_of_quota.{other,total,...}, which
    the window no longer emits; the run is no-baseline, not a MeasurementError."""
    pool = Pool({"requests_per_s": RPS[:1], "cpu_share_of_quota.total": [(0.9, 0.91)]})
    rows = judge_result({"requests_per_s": (20.0, 20.1)}, pool, scenario="engine/transport=cpu/copy=buffer/c=16")
    assert [(v.metric, v.status) for v in rows] == [("requests_per_s", "no-baseline")]


def test_only_a_scenarios_gating_metrics_are_verdicts() -> None:
    """Issue 19 item 7: req/s, TTFT p50, TPOT (its geometric mean over the requests; issue 34) and the CPU per
    request of the role the arm changes gate, and (issue 46) that role's share of the quota; output tok/s (req/s
    again), the p99s, TPOT's p50 and the other roles' zero-sum shares of the quota are report-only."""
    names = ("requests_per_s", "output_tokens_per_s", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_gmean_ms",
             "cpu_s_per_request.http_server", "cpu_s_per_request.scheduler", "cpu_share_of_quota.scheduler",
             "cpu_share_of_quota.http_server")
    pool = Pool({n: RPS for n in names})
    rows = judge_result({n: (20.0, 20.1, 19.9) for n in names}, pool,
                        scenario="engine/transport=cpu/copy=buffer/c=16")
    gated = sorted(v.metric for v in rows if v.is_verdict)
    assert gated == ["cpu_s_per_request.http_server", "cpu_share_of_quota.http_server", "requests_per_s",
                     "tpot_gmean_ms", "ttft_p50_ms"]
    assert "not a gate of this scenario" in next(v for v in rows if v.metric == "tpot_p50_ms").message
    assert not judge_result({"ttft_p99_ms": (300.0, 310.0)}, Pool({}), scenario="engine/copy=buffer")[0].gating
    share = next(v for v in rows if v.metric == "cpu_share_of_quota.scheduler")
    assert share.status == "report-only"
    assert "zero-sum: a starved role reads as an improvement" in share.message  # not the role the arm changes
    assert "not a gate of this scenario" in next(v for v in rows if v.metric == "ttft_p99_ms").message
    ipc = judge_result({n: (20.0, 20.1, 19.9) for n in names}, pool, scenario="engine/transport=cuda_ipc/ipc_cache=on")
    assert "cpu_s_per_request.scheduler" in [v.metric for v in ipc if v.is_verdict]


def test_perf_floor_is_a_percent_of_log_metrics_only() -> None:
    """Issue 19 item 8: --perf-floor 5 % became a floor of 0.05 on a linear metric (2.5x its declared floor); a
    percent has no unit there, so a linear metric keeps its own."""
    v = judge_metric("ipc_opens_per_image", [(0.0, 0.01, 0.0)] * 4, [0.08, 0.08, 0.08], floor=0.5)
    assert v.status == "regression"  # +0.08 opens per image: beyond the declared 0.05, not a floor of 0.5
    assert metric("ipc_opens_per_image").floor_size(0.5) == 0.05
    assert metric("requests_per_s").floor_size(0.05) == pytest.approx(math.log1p(0.05))
    assert metric("cpu_share_of_quota.scheduler").floor_size(0.10) == pytest.approx(math.log1p(0.10))  # log scale


def test_a_gating_metric_that_vanished_names_nvml() -> None:
    """A pool that gates on GPU busy (a live arm's rel.*) and a run whose NVML buffer gave nothing: an error naming
    the fix, never a silently skipped row; the poll (never gating) vanishing is no error."""
    pool = Pool({"requests_per_s": RPS, "rel.gpu_util_buffer_mean": [(1.0, 0.99, 1.01)] * 4,
                 "gpu_util_mean": [(45.0, 46.0)] * 4})
    with pytest.raises(MeasurementError, match="NVML's sample buffer gave no period"):
        judge_result({"requests_per_s": (20.0, 20.1, 19.9)}, pool, scenario="s/copy=stock")
    pool = Pool({"requests_per_s": RPS, "gpu_util_mean": [(45.0, 46.0)] * 4})
    rows = judge_result({"requests_per_s": (20.0, 20.1, 19.9)}, pool, scenario="s/copy=stock")
    assert [v.metric for v in rows] == ["requests_per_s"]


def test_ab_verdict_reports_a_paired_interval() -> None:
    ref = [3.3, 3.31, 3.29, 3.3, 3.32, 3.28]
    cand = [v * 1.2 for v in ref]
    ratios = [math.log(1.2) + d for d in (0.001, -0.002, 0.0015, 0.0, -0.001, 0.002)]
    v = judge_contrast("", "tpot_gmean_ms", ref, cand, ratios, budget=12, units="groups")
    assert v.status == "regression"
    assert v.kind == "group"  # fresh engine groups are its units
    assert "95% CI" in v.message
    assert v.delta == pytest.approx(0.2, rel=0.01)
    assert v.worse_lo is not None
    assert v.worse_lo < v.worse < v.worse_hi


def test_ab_pass_names_what_it_catches_and_which_variance_it_used() -> None:
    ref = [3.3] * 6
    noisy = [math.log(1.25) + d for d in (0.3, -0.3, 0.15, -0.15, 0.24, -0.24)]
    v = judge_contrast("", "tpot_gmean_ms", ref, [4.1] * 6, noisy, budget=6, alpha=0.0025, units="groups")
    assert v.status == "inconclusive"
    assert "95% CI" in v.message
    assert "t with 5 df (no A/A history on this host" in v.message
    quiet = [0.001 * d for d in (1, -1, 2, -2, 1, -1)]
    ok = judge_contrast("", "tpot_gmean_ms", ref, ref, quiet, budget=6, units="groups")
    assert ok.status == "pass"
    assert ok.detectable is not None
    assert 0 < ok.detectable < 0.20  # what it excludes, within the 20 % ceiling
    assert f"catches {ok.detectable:.1%} worse" in ok.message
    narrow = judge_contrast("", "tpot_gmean_ms", ref, ref, noisy, budget=6, detect=0.05, units="groups")
    assert narrow.status == "inconclusive"
    blocks = judge_contrast("", "tpot_gmean_ms", ref, ref, quiet, budget=6, units="pair blocks")
    assert "offset between two starts of one build is not in this interval" in blocks.message
    pooled = judge_contrast("", "tpot_gmean_ms", ref, ref, [0.001], budget=6, units="groups",
                            null=NullSample.of([0.02, -0.02, 0.01, -0.01, 0.0], "this host's A/A history"))
    assert pooled.status == "pass"  # one fresh pair, the spread borrowed from five null pairs
    assert "variance pooled with 5 null pair(s) of this host's A/A history (5 df)" in pooled.message
    share = judge_contrast("", "output_tokens_per_s", ref, ref, quiet, budget=6, units="groups")
    assert share.status == "report-only"  # output tok/s repeats req/s: not a gate


def test_the_recorder_reads_each_windows_engine_instance_from_the_result() -> None:
    """The contract with the runner: ``metadata["window_instance"]`` names the instance of each window, and a metric
    of only some windows (a per-segment value) names its windows; old results without it are one instance."""
    from engine_fixtures.store.results import RunResult

    new = RunResult("engine/x", {"c": "1"}, {"requests_per_s": (1.0, 1.1, 1.2, 1.3), "running_requests_max": (4, 4)},
                    metadata={"window_instance": ["e0", "e0", "e1", "e1"],
                              "sample_windows": {"running_requests_max": [0, 2]}})
    old = RunResult("engine/x", {"c": "1"}, {"requests_per_s": (1.0, 1.1)})
    assert new.aligned("window_instance", "requests_per_s") == ["e0", "e0", "e1", "e1"]
    assert new.aligned("window_instance", "running_requests_max") == ["e0", "e1"]
    assert old.aligned("window_instance", "requests_per_s") is None


def test_the_gating_family_counts_what_really_gates_here() -> None:
    """GPU busy counts as a live arm's rel.* ratio only (never its level, never the poll); each changed role's share
    of the quota counts beside its CPU per request; where rel.<m> is measured it gates, not <m>."""
    from engine_fixtures.judge.gating import gating

    arm = {"copy": "buffer"}
    names = ["requests_per_s", "gpu_util_mean", "gpu_util_buffer_mean", "tpot_gmean_ms",
             "cpu_share_of_quota.http_server", "cpu_share_of_quota.scheduler"]
    assert gating(names, arm) == ("cpu_share_of_quota.http_server", "requests_per_s", "tpot_gmean_ms")
    assert "rel.gpu_util_buffer_mean" in gating([*names, "rel.gpu_util_buffer_mean"], arm)
    cpu = ["requests_per_s", "rel.requests_per_s", "latency_p50_ms", "rel.latency_p50_ms", "copy_per_s"]
    assert gating(cpu, arm) == ("copy_per_s", "rel.latency_p50_ms", "rel.requests_per_s")

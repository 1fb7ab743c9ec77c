"""Verdict rows: every judged metric ends in one of four verdicts; diagnostics and missing baselines are labelled."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine_fixtures.errors import MeasurementError
from engine_fixtures.judge.verdicts import VERDICTS, judge_ab, judge_invariant, judge_metric, judge_result


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


def test_result_diagnostics_missing_metrics_and_gpu_bound_condition() -> None:
    pool = Pool({"requests_per_s": RPS, "throttled_periods": [(3.0, 4.0)] * 4,
                 "gpu_util_mean": [(5.0, 6.0, 5.5)] * 4})
    rows = judge_result({"requests_per_s": (20.0, 20.1, 19.9), "throttled_periods": (3.0, 3.0),
                         "gpu_util_mean": (5.2, 5.4, 5.0)}, pool, scenario="s")
    by = {v.metric: v for v in rows}
    assert by["requests_per_s"].status in VERDICTS
    assert by["throttled_periods"].status == "report-only"
    assert by["gpu_util_mean"].status == "report-only"
    assert "not this arm's bottleneck" in by["gpu_util_mean"].message
    with pytest.raises(MeasurementError, match="baseline judges 'requests_per_s' but this run did not measure it"):
        judge_result({"throttled_periods": (3.0,)}, pool, scenario="s")


def test_gpu_util_is_judged_where_the_gpu_is_the_bottleneck() -> None:
    pool = Pool({"gpu_util_mean": [(82.0, 83.0, 81.5), (80.0, 81.0, 80.5), (83.0, 82.0, 82.5)]})
    (v,) = judge_result({"gpu_util_mean": (60.0, 61.0, 59.0)}, pool, scenario="s")
    assert v.status == "regression"
    assert v.scale == "linear"
    assert v.delta == pytest.approx(60.0 - np.mean([82.0, 83.0, 81.5, 80.0, 81.0, 80.5, 83.0, 82.0, 82.5]))


def test_paired_invariant_holds_fails_and_straddles() -> None:
    torch_rps = [12.0, 12.5, 11.8, 12.2, 12.1]
    holds = judge_invariant("buffer/torch", "requests_per_s", torch_rps, [v * 1.2 for v in torch_rps], 1.05,
                            paired=True)
    assert holds.status == "pass"
    forced = judge_invariant("buffer/torch", "requests_per_s", torch_rps, [v * 1.0 for v in torch_rps], 1.05,
                             paired=True)
    assert forced.status == "regression"
    assert "invariant violated" in forced.message
    with pytest.raises(ValueError, match="one window of each per round"):
        judge_invariant("x", "requests_per_s", [1.0, 2.0], [1.0], 1.0, paired=True)


def test_unpaired_invariant_for_arms_of_separate_engines() -> None:
    buffer_arm = [35.0, 36.0, 34.5, 35.5, 35.2]
    stock = [16.0, 16.4, 15.8, 16.1, 16.2]
    v = judge_invariant("stock/buffer", "requests_per_s", buffer_arm, stock, 0.9, paired=False)
    assert v.status == "regression"
    lat = judge_invariant("stock/buffer", "ttft_p50_ms", [300.0, 310.0, 305.0], [305.0, 300.0, 309.0], 0.9,
                          paired=False)
    assert lat.status == "pass"  # lower is better: the same latency is 1.0x >= 0.9x


def test_ab_verdict_reports_a_paired_interval() -> None:
    ref = [3.3, 3.31, 3.29, 3.3, 3.32, 3.28]
    cand = [v * 1.2 for v in ref]
    ratios = [math.log(1.2) + d for d in (0.001, -0.002, 0.0015, 0.0, -0.001, 0.002)]
    v = judge_ab("tpot_p50_ms", ref, cand, ratios, budget=12)
    assert v.status == "regression"
    assert v.kind == "paired"
    assert "95% CI" in v.message
    assert v.delta == pytest.approx(0.2, rel=0.01)

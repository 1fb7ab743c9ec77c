"""Properties of the statistical gate and its measured quality on synthetic noise."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine_fixtures.judge.gate import ALPHA, judge, judge_ratio
from engine_fixtures.judge.gate_quality import simulate

values = st.lists(st.floats(min_value=1.0, max_value=1e6, allow_nan=False), min_size=1, max_size=12)
gated = st.sampled_from(["requests_per_s", "latency_p50_ms", "ttft_p99_ms", "ipc_opens_per_image"])


@given(gated, values, values, st.integers(min_value=-20, max_value=20))
def test_judge_is_invariant_to_scaling_both_samples(name: str, a: list[float], b: list[float],
                                                    k: int) -> None:
    scale = 2.0**k  # exact in binary floating point
    v1 = judge(name, a, b)
    v2 = judge(name, [x * scale for x in a], [x * scale for x in b])
    assert v1.status == v2.status
    assert v1.p_value == v2.p_value


@given(gated, values)
def test_identical_samples_never_regress(name: str, a: list[float]) -> None:
    assert judge(name, a, a).status in ("pass", "unstable")


@given(st.integers(min_value=0, max_value=2**32 - 1), st.floats(min_value=0.0, max_value=0.03))
def test_fifty_percent_shift_with_ten_repeats_always_regresses(seed: int, cv: float) -> None:
    rng = np.random.default_rng(seed)
    base = 100.0 * (1 + cv * rng.uniform(-1, 1, 10))
    cur = 100.0 * (1 + cv * rng.uniform(-1, 1, 10))
    assert judge("latency_p50_ms", base, cur * 1.5).status == "regression"
    assert judge("requests_per_s", base, cur / 1.5).status == "regression"
    # direction respected: the same moves the other way are improvements, never regressions
    assert judge("latency_p50_ms", base, cur / 1.5).status == "improvement"
    assert judge("requests_per_s", base, cur * 1.5).status == "improvement"


def test_too_few_or_too_noisy_samples_are_unstable_not_judged() -> None:
    assert judge("latency_p50_ms", [10, 10], [20, 20]).status == "unstable"
    noisy = judge("latency_p50_ms", [10, 13, 8], [30, 39, 24])
    assert noisy.status == "unstable"
    assert "CV" in noisy.message
    assert judge("latency_p50_ms", None, [1, 2, 3]).status == "no-baseline"
    assert judge("producer_cpu_cores", [1, 1, 1], [9, 9, 9]).status == "report-only"


def test_beyond_tolerance_but_not_significant_passes() -> None:
    v = judge("latency_p50_ms", [10.0, 10.5, 11.0, 10.2], [11.4, 10.1, 12.0, 12.3])
    assert v.status == "pass"
    assert v.p_value is not None
    assert v.p_value > ALPHA


def test_ratio_invariant_direction_and_bound() -> None:
    torch_arm = [100.0, 101.0, 99.0, 100.5, 99.5]
    assert judge_ratio("copy_per_s", torch_arm, [97.0, 97.5, 96.5, 97.2, 96.8], 0.95).status == "pass"
    assert judge_ratio("copy_per_s", torch_arm, [80.0, 81.0, 79.0, 80.5, 79.5], 0.95).status == "regression"
    # lower is better: current latency 30 % above the reference violates ">= 0.8x as good"
    assert judge_ratio("latency_p50_ms", torch_arm, [x * 1.3 for x in torch_arm], 0.8).status == "regression"
    assert judge_ratio("latency_p50_ms", torch_arm, [x * 1.2 for x in torch_arm], 0.8).status == "pass"
    with pytest.raises(ValueError, match="direction"):
        judge_ratio("producer_cpu_cores", [1.0], [1.0], 0.9)


FALSE_ALARM_BOUND = 0.05  # one-sided alpha: a correct gate cannot exceed it on equal distributions


@pytest.mark.parametrize("n", [3, 5, 10])
@pytest.mark.parametrize("cv", [0.03, 0.05])
def test_false_alarm_rate_on_equal_distributions_is_below_bound(n: int, cv: float) -> None:
    for tolerance in (0.05, 0.10):
        cell = simulate(cv, n, tolerance, 0.0, trials=2000, seed=7)
        assert cell.regression_rate < FALSE_ALARM_BOUND, cell


def test_detection_of_a_twenty_percent_shift_at_ten_repeats() -> None:
    cell = simulate(0.05, 10, 0.10, 0.20, trials=500, seed=7)
    assert cell.regression_rate > 0.95, cell

"""The metric registry: every gated metric has one direction and a tolerance > 0."""

from __future__ import annotations

import pytest

from engine_fixtures.errors import PerfError
from engine_fixtures.judge.metrics import METRICS, PATTERNS, Metric, UnknownMetric, metric


@pytest.mark.parametrize("m", [*METRICS.values(), *PATTERNS], ids=lambda m: m.name)
def test_gated_metric_has_exactly_one_direction_and_positive_tolerance(m: Metric) -> None:
    if m.gates:
        assert m.direction in ("higher", "lower")
        assert m.tolerance > 0
    else:
        assert m.tolerance >= 0


def test_directions_of_known_metrics() -> None:
    # TensorRT-LLM #18741: TPOT gated as "higher is better" missed a 2.5x slowdown.
    for name in ("requests_per_s", "output_tokens_per_s", "copy_per_s", "running_requests_max"):
        assert metric(name).direction == "higher"
        assert metric(name).gates
    for name in ("latency_p50_ms", "latency_p99_ms", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms",
                 "itl_p50_ms", "e2e_p50_ms", "ipc_opens_per_image", "rebuild_ms_per_image"):
        assert metric(name).direction == "lower"
        assert metric(name).gates
    for name in ("producer_cpu_cores", "producer_share_of_quota", "throttled_periods", "throttled_ratio",
                 "gpu_util_mean", "scheduling_delay_p99_ms", "achieved_concurrency"):
        assert not metric(name).gates


def test_role_pattern_resolves_with_its_own_name() -> None:
    m = metric("cpu_cores.scheduler")
    assert m.name == "cpu_cores.scheduler"
    assert m.unit == "cores"
    assert not m.gates


@pytest.mark.parametrize("name", ["nope", "cpu_cores.", "cpu_cores.a b", "requests_per_s.x"])
def test_unknown_metric_lists_known_names(name: str) -> None:
    with pytest.raises(UnknownMetric) as info:
        metric(name)
    assert isinstance(info.value, KeyError)
    assert isinstance(info.value, PerfError)
    assert "requests_per_s" in str(info.value)
    assert "cpu_cores.<role>" in str(info.value)


def test_gated_metric_without_direction_is_rejected() -> None:
    with pytest.raises(ValueError, match="direction"):
        Metric("x", "ms", "none", 0.1, True, "")
    with pytest.raises(ValueError, match="tolerance"):
        Metric("x", "ms", "lower", 0.0, True, "")
    with pytest.raises(ValueError, match="direction"):
        Metric("x", "ms", "up", 0.1, False, "")  # type: ignore[arg-type]

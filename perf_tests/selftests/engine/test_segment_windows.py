"""``scenarios.segment``'s per-window values and stored requests on synthetic segments (no engine, no samplers:
a fixed CPU reading stands in for the cut of the CPU sampler, a fixed GPU state for the GPU sampler's), and the
refusal of a window the GPU was throttled in."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from engine_fixtures.errors import MeasurementError
from engine_fixtures.judge.metrics import metric
from engine_fixtures.loadgen.stream import Segment
from engine_fixtures.sampling.clock_events import REASONS
from engine_fixtures.scenarios.refusal import (
    MAX_STEAL_FRACTION,
    MAX_THROTTLED_FRACTION,
    steal_refusal,
    throttle_refusal,
    window_refusal,
)
from engine_fixtures.scenarios.results import refusal_finding, refused
from engine_fixtures.scenarios.segment import REQUEST_COLUMNS, stored_window, window_requests, window_values
from perf_tests.support.lockstep import closed_loop, segment_of

C, PERIOD, WINDOW = 16, 0.65, 3.0
SCHEDULER_CORES = 0.8  # the scheduler's CPU over every window


class FixedCpu:
    """The cut a CPU sampler would give: a constant number of cores for the scheduler."""

    def cut(self, t0: float, t1: float) -> dict[str, float]:
        return {"cpu.scheduler.cores": SCHEDULER_CORES}


SAMPLERS = SimpleNamespace(active=(FixedCpu(),))


def lockstep_segment(seconds: float = 64.0) -> Segment:
    return segment_of(closed_loop(C, PERIOD, seconds, jitter_s=0.004, tokens=32), C, 1.3, 60.0)


def values_of(seg: Segment, n: int = 20) -> list[dict[str, float]]:
    marks = [seg.measure_at + k * WINDOW for k in range(n)]
    return [window_values(seg, SAMPLERS, t0, t0 + WINDOW) for t0 in marks]  # type: ignore[arg-type]


def cv(values: list[float]) -> float:
    return float(np.std(values, ddof=1) / np.mean(values))


def test_req_per_s_is_continuous_and_the_count_is_a_diagnostic() -> None:
    windows = values_of(lockstep_segment())
    counted = [w["requests_per_s_counted"] for w in windows]
    assert set(np.round(counted, 2)) == {round(64 / 3, 2), round(80 / 3, 2)}
    assert cv([w["requests_per_s"] for w in windows]) < 0.01 < 0.05 < cv(counted)
    assert cv([w["output_tokens_per_s"] for w in windows]) < 0.01
    assert not metric("requests_per_s_counted").judged


def test_cpu_per_request_divides_by_the_continuous_rate() -> None:
    windows = values_of(lockstep_segment())
    for w in windows:
        assert w["cpu_s_per_request.scheduler"] == pytest.approx(SCHEDULER_CORES / w["requests_per_s"])
    per_request = [w["cpu_s_per_request.scheduler"] for w in windows]
    by_count = [SCHEDULER_CORES / w["requests_per_s_counted"] for w in windows]
    # The same CPU reading over a counted denominator would inherit the bursts' quantization.
    assert cv(per_request) < 0.01 < 0.05 < cv(by_count)
    assert np.mean(per_request) == pytest.approx(SCHEDULER_CORES * PERIOD / C, rel=0.01)


def test_latencies_stay_over_the_requests_that_finished_in_the_window() -> None:
    seg = lockstep_segment()
    t0 = seg.measure_at
    done = seg.completed_in(t0, t0 + WINDOW)
    w = window_values(seg, SAMPLERS, t0, t0 + WINDOW)  # type: ignore[arg-type]
    assert w["ttft_p50_ms"] == pytest.approx(float(np.percentile([r.ttft_s for r in done], 50)) * 1000)
    assert w["tpot_p50_ms"] == pytest.approx(float(np.percentile([r.tpot_s for r in done], 50)) * 1000)


def test_a_window_without_a_completion_is_an_error_not_a_zero() -> None:
    seg = segment_of(closed_loop(2, 10.0, 30.0), 2, 0.0, 30.0)  # requests end at 10, 20, 30 s only
    with pytest.raises(MeasurementError, match="zero completed requests"):
        window_values(seg, SAMPLERS, seg.start + 11.0, seg.start + 14.0)  # type: ignore[arg-type]


def test_stored_requests_recompute_the_window_values() -> None:
    seg = lockstep_segment()
    for k in range(5):
        t0 = seg.measure_at + k * WINDOW
        stored = window_requests(seg, t0, t0 + WINDOW)
        assert stored["columns"] == list(REQUEST_COLUMNS)
        assert stored["origin_s"] == seg.start
        assert stored["t0_s"] == pytest.approx(t0 - seg.start, abs=1e-4)
        lo, hi, records = stored_window(stored)
        # Every request whose lifetime overlaps the window, no other.
        assert len(records) == sum(1 for r in seg.records if r.sent_s < hi and r.end_s >= lo)
        w = window_values(seg, SAMPLERS, t0, t0 + WINDOW)  # type: ignore[arg-type]
        again = segment_of(records, C, 0.0, 1.0, start=seg.start)
        # Times are kept to 0.1 ms: the share of each of the <= 2C requests on an edge moves by at most 1e-4 s over
        # its lifetime (> 0.6 s here); the requests inside keep a share of exactly 1.
        tol = 2 * C * 1e-4 / 0.6 / WINDOW
        assert again.progress_rate(seg.start + lo, seg.start + hi) == pytest.approx(w["requests_per_s"], abs=tol)
        assert len(again.completed_in(seg.start + lo, seg.start + hi)) / WINDOW == w["requests_per_s_counted"]
        ttft = np.percentile([r.ttft_s for r in again.completed_in(seg.start + lo, seg.start + hi)], 50) * 1000
        assert ttft == pytest.approx(w["ttft_p50_ms"], abs=0.1)


def test_stored_windows_from_another_format_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="needs t0_s, t1_s, columns and rows"):
        stored_window({"rows": []})
    with pytest.raises(ValueError, match="another version"):
        stored_window({"t0_s": 0, "t1_s": 3, "columns": ["end_s", "sent_s"], "rows": []})


class FixedGpu:
    """The cut a GPU sampler would give: a fixed GPU state, at its power cap in ``power_cap`` of the readings and
    slowed by the hardware in ``hw`` of them (together in ``slowed``); ``events`` False: NVML did not report the
    clock-event reasons."""

    def __init__(self, power_cap: float = 0.0, hw: float = 0.0, slowed: float | None = None,
                 events: bool = True, clock: float = 1755.0, max_clock: float | None = None) -> None:
        self.state = {"gpu.util.mean": 55.0, "gpu.sm_clock_mhz.mean": clock, "gpu.mem_clock_mhz.mean": 3201.0,
                      "gpu.power_w.mean": 420.0, "gpu.temp_c.mean": 71.0, "gpu.temp_c.max": 74.0}
        if max_clock is not None:
            self.state["gpu.sm_clock_max_mhz"] = max_clock
        if events:
            self.state |= {f"gpu.throttle.{name}": 0.0 for name in REASONS}
            self.state |= {"gpu.throttle.sw_power_cap": power_cap, "gpu.throttle.hw_slowdown": hw,
                           "gpu.throttled_fraction": max(power_cap, hw) if slowed is None else slowed}

    def cut(self, t0: float, t1: float) -> dict[str, float]:
        return dict(self.state)


def gpu_window(gpu: FixedGpu) -> dict[str, float]:
    seg = lockstep_segment(20.0)
    samplers = SimpleNamespace(active=(FixedCpu(), gpu))
    return window_values(seg, samplers, seg.measure_at, seg.measure_at + WINDOW)  # type: ignore[arg-type]


@pytest.mark.parametrize("slowed", [0.0, MAX_THROTTLED_FRACTION])
def test_an_unthrottled_window_is_kept_with_its_gpu_state(slowed: float) -> None:
    w = gpu_window(FixedGpu(power_cap=slowed))
    assert throttle_refusal(w) is None
    assert w["requests_per_s"] > 0
    assert w["gpu_util_mean"] == 55.0
    assert (w["gpu_temp_c_mean"], w["gpu_temp_c_max"], w["gpu_power_w_mean"]) == (71.0, 74.0, 420.0)
    assert w["gpu_throttle_sw_power_cap"] == w["gpu_throttled_fraction"] == slowed
    assert {f"gpu_throttle_{name}" for name in REASONS} <= set(w)
    for name in w:
        metric(name)  # every value is a registered metric


def test_a_throttled_window_keeps_only_its_gpu_telemetry_and_says_why() -> None:
    w = gpu_window(FixedGpu(power_cap=0.25, hw=0.1, slowed=0.3))
    assert throttle_refusal(w) == ("the GPU was slowed by heat or power in 30% of its readings (hw_slowdown 10%, "
                                   "sw_power_cap 25%), more than 5%")
    assert w["gpu_throttled_fraction"] == 0.3
    assert w["gpu_sm_clock_mhz_mean"] == 1755.0  # what the window was refused for stays, as report-only rows
    assert "requests_per_s" not in w
    assert "gpu_util_mean" not in w  # judged where the GPU is the bottleneck
    assert not [name for name in w if metric(name).judged or not name.startswith("gpu_")]


def test_a_power_cap_that_kept_the_clock_within_five_percent_of_its_maximum_keeps_the_window() -> None:
    """The H200 of 2026-12-04 asserted its power cap in 87 % of the readings at 349 of 700 W, holding 1953 of
    1980 MHz: refusing those windows refused every window of the host."""
    kept = gpu_window(FixedGpu(power_cap=0.87, clock=1953.5, max_clock=1980.0))
    assert throttle_refusal(kept) is None
    assert kept["requests_per_s"] > 0
    assert kept["gpu_throttle_sw_power_cap"] == 0.87  # still said, as a report-only row
    assert kept["gpu_sm_clock_max_mhz"] == 1980.0
    capped = gpu_window(FixedGpu(power_cap=0.87, clock=1755.0, max_clock=1980.0))  # 11 % of the clock lost
    assert throttle_refusal(capped) == ("the GPU was slowed by heat or power in 87% of its readings (sw_power_cap "
                                        "87%), more than 5%; its SM clock 11.4% below the maximum")
    assert "requests_per_s" not in capped
    halved = gpu_window(FixedGpu(hw=0.1, clock=1953.5, max_clock=1980.0))  # the hardware: refused, whatever clock
    assert throttle_refusal(halved) is not None


def test_a_window_without_clock_event_reasons_cannot_be_refused() -> None:
    w = gpu_window(FixedGpu(events=False))
    assert throttle_refusal(w) is None
    assert "gpu_throttled_fraction" not in w  # no number, never a zero
    assert w["requests_per_s"] > 0


def test_a_visit_with_refused_windows_is_a_finding_counting_and_naming_them() -> None:
    kept, slowed = gpu_window(FixedGpu()), gpu_window(FixedGpu(power_cap=0.5))
    assert refused([kept, slowed, kept]) == {1: throttle_refusal(slowed)}
    assert refusal_finding("cpu/stock on stub-1", [kept, kept]) is None
    line = refusal_finding("cpu/stock on stub-1", [kept, slowed, slowed], first=4)
    assert line == ("cpu/stock on stub-1: 2 of 3 window(s) of a visit refused (window 6: the GPU "
                    "was slowed by heat or power in 50% of its readings (sw_power_cap 50%), more than 5%; window 7: "
                    "the GPU was slowed by heat or power in 50% of its readings (sw_power_cap 50%), more than 5%); "
                    "they count toward no verdict (a block left without a window of an arm gives its contrasts no "
                    "effect)")


class FixedHost:
    """The cut a host sampler would give: steal over the window and the probe's times."""

    def __init__(self, steal: float) -> None:
        self.steal = steal

    def cut(self, t0: float, t1: float) -> dict[str, float]:
        return {"host.steal_fraction": self.steal, "host.probe_cpu_ms": 1.1, "host.probe_wall_ms": 1.3}


def host_window(steal: float) -> dict[str, float]:
    seg = lockstep_segment(20.0)
    samplers = SimpleNamespace(active=(FixedCpu(), FixedGpu(), FixedHost(steal)))
    return window_values(seg, samplers, seg.measure_at, seg.measure_at + WINDOW)  # type: ignore[arg-type]


def test_the_hosts_steal_and_probe_are_report_only_rows_of_every_window() -> None:
    w = host_window(0.01)
    assert (w["host_steal_fraction"], w["host_probe_cpu_ms"], w["host_probe_wall_ms"]) == (0.01, 1.1, 1.3)
    assert window_refusal(w) is None
    assert w["requests_per_s"] > 0
    assert not metric("host_steal_fraction").judged
    assert not metric("host_probe_cpu_ms").judged


def test_a_window_the_hypervisor_stole_from_keeps_only_its_telemetry_and_says_why() -> None:
    w = host_window(MAX_STEAL_FRACTION + 0.07)
    assert steal_refusal(w) == window_refusal(w) == ("the hypervisor stole 12.0% of the host's CPU time in it, more "
                                                     "than 5% (sampling.host)")
    assert "requests_per_s" not in w
    assert "ttft_p50_ms" not in w
    assert (w["host_probe_cpu_ms"], w["gpu_sm_clock_mhz_mean"]) == (1.1, 1755.0)  # what it was refused for stays
    assert refusal_finding("ab/x/reference@1 on e-1", [w]).startswith(
        "ab/x/reference@1 on e-1: 1 of 1 window(s) of a visit refused (window 1: the hypervisor stole 12.0%")


def test_the_steal_limit_is_the_operators_option() -> None:
    """``--perf-max-steal`` (the plugin's ``configure_steal`` at start): 15 % keeps a window with 12 % stolen."""
    from engine_fixtures.options import OPTIONS_BY_NAME
    from engine_fixtures.scenarios.refusal import configure_steal

    assert OPTIONS_BY_NAME["max_steal"].parse("15%") == pytest.approx(0.15)
    previous = configure_steal(0.15)
    try:
        assert "requests_per_s" in host_window(0.12)
    finally:
        configure_steal(previous)
    assert "requests_per_s" not in host_window(0.12)

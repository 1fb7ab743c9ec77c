"""The GPU sampler: against the real NVML (or its real absence) and a busy GPU, and its per-window cut of
utilisation, clocks, power, temperature and the slowing clock-event reasons against a fake NVML module."""

from __future__ import annotations

import pynvml
import pytest

from engine_fixtures.judge.metrics import metric
from engine_fixtures.nvml import GpuInfo, _cuda_visible, gpu_inventory, nvml_reason
from engine_fixtures.sampling.base import Sampler, SamplerSet
from engine_fixtures.sampling.clock_events import REASONS, slowing
from engine_fixtures.sampling.cpu import CpuSampler
from engine_fixtures.sampling.gpu import GpuSampler
from perf_tests.selftests.harness.children import IDLE, READY, Spawn, hold
from perf_tests.support.fake_nvml import FakeNvml, fake_nvml


def test_unavailable_sampler_is_skipped_with_its_reason(spawn: Spawn) -> None:
    idle = spawn(IDLE)
    gpu = GpuSampler([10**6])  # no machine has a millionth GPU
    cpu = CpuSampler(lambda: {"idle": [idle.pid]}, interval_s=0.05)
    assert isinstance(cpu, Sampler)
    assert isinstance(gpu, Sampler)
    with SamplerSet([cpu, gpu]) as samplers:
        hold(cpu, 2)
    reason = samplers.unavailable["gpu"]
    assert reason.startswith(("NVML not available", "GPU indices [1000000] requested"))
    assert samplers.active == (cpu,)
    assert not any(k.startswith("gpu.") for k in samplers.summary())


@pytest.mark.skipif(nvml_reason() is None, reason="NVML is present here; this checks the no-driver path")
def test_gpu_sampler_states_why_it_is_unavailable() -> None:
    expected = ("NVML not available: libnvidia-ml.so.1 not found (NVIDIA driver not installed); "
                "GPU metrics are not collected")
    assert GpuSampler([0]).available() == expected
    assert gpu_inventory() == expected


def test_cuda_visible_devices_filters_the_inventory() -> None:
    infos = [GpuInfo(i, "NVIDIA H200", 143771.0, "570.1", f"GPU-{i}aaa") for i in range(4)]
    assert _cuda_visible(infos, None) == infos
    assert _cuda_visible(infos, "") == []
    assert [g.index for g in _cuda_visible(infos, "2,0")] == [2, 0]
    assert [g.index for g in _cuda_visible(infos, "GPU-3,9,1")] == [3]  # CUDA stops at an invalid entry


@pytest.mark.gpu(1)
def test_gpu_sampler_sees_a_busy_gpu_and_its_process(spawn: Spawn) -> None:
    load = ("import torch\n"
            "x = torch.randn(8192, 8192, device='cuda')\n"
            "torch.cuda.synchronize()\n" + READY +
            "while True: x = (x @ x).clamp_(-1, 1)\n")
    child = spawn(load)
    gpu = GpuSampler([0], pids_fn=lambda: {"load": [child.pid]}, interval_s=0.1)
    with gpu:
        hold(gpu, 15)
    s = gpu.summary()
    assert s["gpu.util.p50"] > 50
    assert s["gpu.mem_used_mib.max"] > 256  # the 256 MiB tensor plus the CUDA context
    assert s["gpu.sm_clock_mhz.mean"] > 0
    assert s["gpu.temp_c.max"] > 0 if "gpu.temp_c.max" in s else "temperature" in gpu.unreported
    assert 0.0 <= s["gpu.throttled_fraction"] <= 1.0 if "gpu.throttled_fraction" in s else gpu.unreported
    if "gpu.proc_mem_mib.load" in s:
        assert s["gpu.proc_mem_mib.load"] > 256
    else:
        assert gpu.proc_mem_unavailable, "no per-process memory and no reason why"


def test_gpu_clocks_and_power_are_cut_per_window(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml(switch_after=4)
    fake_nvml(monkeypatch, fake)
    gpu = GpuSampler([0, 1], interval_s=0.01)
    assert gpu.available() is None
    with gpu:
        hold(gpu, 9)
    times = gpu.util.times
    assert len(times) == fake.readings >= 10
    first, second = gpu.cut(times[0], times[4]), gpu.cut(times[4], times[-1] + 1.0)
    assert first["gpu.sm_clock_mhz.mean"] == pytest.approx(1740.0)  # (1980 + 1500) / 2, readings 1-4
    assert first["gpu.mem_clock_mhz.mean"] == pytest.approx(3201.0)
    assert first["gpu.power_w.mean"] == pytest.approx(600.0)  # (700 + 500) W / 2
    assert second["gpu.sm_clock_mhz.mean"] == pytest.approx(1100.0)  # a throttled window reads as one
    assert second["gpu.mem_clock_mhz.mean"] == pytest.approx(2619.0)
    assert second["gpu.power_w.mean"] == pytest.approx(250.0)
    assert first["gpu.util.mean"] == second["gpu.util.mean"] == pytest.approx(40.0)
    assert gpu.summary()["gpu.mem_clock_mhz.mean"] == pytest.approx((4 * 3201.0 + (len(times) - 4) * 2619.0)
                                                                     / len(times))
    assert first["gpu.sm_clock_max_mhz"] == second["gpu.sm_clock_max_mhz"] == 1980.0  # read once, NVML's maximum
    for name in ("gpu_sm_clock_mhz_mean", "gpu_mem_clock_mhz_mean", "gpu_power_w_mean", "gpu_sm_clock_max_mhz"):
        assert not metric(name).judged  # telemetry: report-only rows, never a gate


def test_an_unreported_maximum_clock_gives_no_number_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_nvml(monkeypatch, FakeNvml(switch_after=100, max_clock=False))
    gpu = GpuSampler([0, 1], interval_s=0.01)
    with gpu:
        hold(gpu, 3)
    assert "gpu.sm_clock_max_mhz" not in gpu.cut(gpu.util.times[0], gpu.util.times[-1] + 1.0)
    assert "refused whatever clock it kept" in gpu.unreported["maximum SM clock"]


def test_gpu_power_is_absent_where_nvml_does_not_report_it(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_nvml(monkeypatch, FakeNvml(switch_after=100, power=False))
    gpu = GpuSampler([0, 1], interval_s=0.01)
    with gpu:
        hold(gpu, 3)
    cut = gpu.cut(gpu.util.times[0], gpu.util.times[-1] + 1.0)
    assert "gpu.power_w.mean" not in cut
    assert "gpu.power_w.mean" not in gpu.summary()
    assert cut["gpu.sm_clock_mhz.mean"] == pytest.approx(1740.0)


def test_gpu_temperature_and_slowing_reasons_are_cut_per_window(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml(switch_after=4)
    fake_nvml(monkeypatch, fake)
    gpu = GpuSampler([0, 1], interval_s=0.01)
    with gpu:
        hold(gpu, 9)
    times = gpu.util.times
    first, second = gpu.cut(times[0], times[4]), gpu.cut(times[4], times[-1] + 1.0)
    assert first["gpu.temp_c.mean"] == pytest.approx(65.0)  # (60 + 70) / 2
    assert first["gpu.temp_c.max"] == 70.0
    assert second["gpu.temp_c.mean"] == pytest.approx(83.0)
    assert second["gpu.temp_c.max"] == 86.0
    # Idle, applications clocks and sync boost are not slowdowns: a window with only those was never slowed.
    assert {k: v for k, v in first.items() if k.startswith("gpu.thrott")} == {
        **{f"gpu.throttle.{name}": 0.0 for name in REASONS}, "gpu.throttled_fraction": 0.0}
    # One GPU at its power cap, the other slowed for heat: a reason counts where any listed GPU reports it.
    assert {name: second[f"gpu.throttle.{name}"] for name in REASONS} == {
        "hw_slowdown": 0.0, "hw_thermal_slowdown": 1.0, "hw_power_brake_slowdown": 0.0, "sw_thermal_slowdown": 1.0,
        "sw_power_cap": 1.0}
    assert second["gpu.throttled_fraction"] == 1.0
    straddling = gpu.cut(times[2], times[6])  # readings 3 and 4 before the switch, 5 and 6 after it
    assert straddling["gpu.throttled_fraction"] == pytest.approx(0.5)
    assert straddling["gpu.throttle.sw_power_cap"] == pytest.approx(0.5)
    summary = gpu.summary()
    slowed = (len(times) - 4) / len(times)
    assert summary["gpu.throttled_fraction"] == pytest.approx(slowed)
    assert summary["gpu.throttle.hw_slowdown"] == 0.0
    assert summary["gpu.temp_c.max"] == 86.0
    assert summary["gpu.temp_c.mean"] == pytest.approx(65.0 * (1 - slowed) + 83.0 * slowed)
    assert gpu.unreported == {}


def test_every_gpu_window_value_is_registered_report_only_telemetry(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_nvml(monkeypatch, FakeNvml(switch_after=2))
    gpu = GpuSampler([0, 1], interval_s=0.01)
    with gpu:
        hold(gpu, 3)
    cut = gpu.cut(gpu.util.times[0], gpu.util.times[-1] + 1.0)
    assert len(cut) == 3 + 1 + 1 + 2 + len(REASONS) + 1  # util, clocks, max clock, power, temps, reasons, any
    for key in cut:
        name = key.replace(".", "_")  # as the segment names a window's values (scenarios.segment)
        assert metric(name).judged == (name == "gpu_util_mean"), name  # telemetry: report-only rows, never a gate


def test_fields_nvml_does_not_report_give_no_number_and_say_why_once(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_nvml(monkeypatch, FakeNvml(switch_after=100, power=False, temperature=False, events=False))
    gpu = GpuSampler([0, 1], interval_s=0.01)
    with gpu:
        hold(gpu, 6)
    cut = gpu.cut(gpu.util.times[0], gpu.util.times[-1] + 1.0)
    for absent in ("gpu.power_w", "gpu.temp_c", "gpu.throttle", "gpu.throttled_fraction"):
        assert not any(k.startswith(absent) for k in (*cut, *gpu.summary())), absent  # no number, never a zero
    assert cut["gpu.sm_clock_mhz.mean"] == pytest.approx(1740.0)
    assert sorted(gpu.unreported) == ["clock-event reasons", "power", "temperature"]  # one line each, not per reading
    assert gpu.unreported["temperature"] == ("NVML does not report the temperature of GPU 0 "
                                             "(NVML_ERROR_NOT_SUPPORTED): no gpu.temp_c numbers")
    assert "none is refused for it" in gpu.unreported["clock-event reasons"]


@pytest.mark.parametrize("binding", ["old", "old-driver"])
def test_clock_event_reasons_fall_back_to_the_older_name(monkeypatch: pytest.MonkeyPatch, binding: str) -> None:
    fake = FakeNvml(switch_after=0, binding=binding)
    fake_nvml(monkeypatch, fake)
    gpu = GpuSampler([0, 1], interval_s=0.01)
    with gpu:
        hold(gpu, 3)
    assert gpu.summary()["gpu.throttled_fraction"] == 1.0
    assert gpu.summary()["gpu.throttle.sw_power_cap"] == 1.0
    assert fake.older_calls == 2 * fake.readings  # every reading of both GPUs, once the newer name failed
    assert gpu.unreported == {}


def test_only_heat_and_power_reasons_are_slowdowns() -> None:
    assert slowing(pynvml.nvmlClocksEventReasonAll) == REASONS
    for not_slowing in (pynvml.nvmlClocksEventReasonGpuIdle, pynvml.nvmlClocksEventReasonApplicationsClocksSetting,
                        pynvml.nvmlClocksEventReasonSyncBoost, pynvml.nvmlClocksEventReasonDisplayClockSetting,
                        pynvml.nvmlClocksEventReasonNone):
        assert slowing(not_slowing) == ()
    assert slowing(pynvml.nvmlClocksThrottleReasonHwPowerBrakeSlowdown) == ("hw_power_brake_slowdown",)

"""A stand-in for nvidia-ml-py (``pynvml``) with two GPUs, for the self-tests of what reads NVML on a machine without
a GPU (the GPU sampler, a segment's GPU values, the runner's refusal of throttled windows). Self-tests only: the
product reads the real NVML or none (``engine_fixtures.nvml``).

``fake_nvml(monkeypatch, fake)`` puts ``fake`` where ``engine_fixtures.sampling.gpu``,
``engine_fixtures.sampling.gpu_buffer`` and ``engine_fixtures.nvml`` read ``pynvml``, for one test."""

from __future__ import annotations

from types import SimpleNamespace

import pynvml
import pytest

import engine_fixtures.nvml
import engine_fixtures.sampling.gpu
import engine_fixtures.sampling.gpu_buffer


class FakeNvml:
    """Two GPUs through the NVML calls the GPU sampler makes. Every reading up to ``switch_after`` reads the
    first values and every later one the second (SM clock, power, temperature and clock-event reasons per GPU,
    memory clock on both), so a cut before and after the switch must see each level alone. Before the switch the
    GPUs report only reasons that are not slowdowns (idle, applications clocks, sync boost); after it GPU 0 is at its
    power cap and GPU 1 slowed for heat by the hardware and the driver. ``power``, ``temperature``, ``events`` False:
    NVML_ERROR_NOT_SUPPORTED. ``binding``: ``"new"`` has ``nvmlDeviceGetCurrentClocksEventReasons``, ``"old"`` only
    the older ``...ThrottleReasons`` (nvidia-ml-py before 12.535), ``"old-driver"`` the newer name whose function the
    driver lacks (NVML_ERROR_FUNCTION_NOT_FOUND)."""

    NVMLError = pynvml.NVMLError
    NVMLError_NotSupported = pynvml.NVMLError_NotSupported
    NVMLError_NotFound = pynvml.NVMLError_NotFound
    NVML_GPU_UTILIZATION_SAMPLES = pynvml.NVML_GPU_UTILIZATION_SAMPLES
    NVMLError_FunctionNotFound = pynvml.NVMLError_FunctionNotFound
    NVML_CLOCK_SM = pynvml.NVML_CLOCK_SM
    NVML_CLOCK_MEM = pynvml.NVML_CLOCK_MEM
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU
    SM = ((1980.0, 1500.0), (1200.0, 1000.0))
    MEM = (3201.0, 2619.0)
    POWER_MW = ((700_000, 500_000), (300_000, 200_000))
    TEMP_C = ((60, 70), (80, 86))
    EVENTS = ((pynvml.nvmlClocksEventReasonGpuIdle | pynvml.nvmlClocksEventReasonSyncBoost,
               pynvml.nvmlClocksEventReasonApplicationsClocksSetting),
              (pynvml.nvmlClocksEventReasonSwPowerCap,
               pynvml.nvmlClocksEventReasonHwThermalSlowdown | pynvml.nvmlClocksEventReasonSwThermalSlowdown))

    def __init__(self, switch_after: int, power: bool = True, temperature: bool = True, events: bool = True,
                 binding: str = "new", max_clock: bool = True) -> None:
        self.switch_after = switch_after
        self.max_clock = max_clock
        self.power = power
        self.temperature = temperature
        self.events = events
        self.readings = 0
        self.util_samples: dict[int, list[tuple[float, float]]] = {}  # the sample buffers, below
        self.proc_samples: dict[int, list[tuple[float, int, float]]] = {}
        self.buffer = "ok"
        self.buffer_calls = 0
        self.older_calls = 0  # reads through nvmlDeviceGetCurrentClocksThrottleReasons
        if binding == "new":
            self.nvmlDeviceGetCurrentClocksEventReasons = self._events
        elif binding == "old-driver":
            self.nvmlDeviceGetCurrentClocksEventReasons = self._no_function

    def _phase(self) -> int:
        return 0 if self.readings <= self.switch_after else 1

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:
        if h == 0:
            self.readings += 1  # one reading of both GPUs starts with GPU 0's utilisation
        return SimpleNamespace(gpu=40.0)

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(used=1024 * 1024 * 1024, total=141 * 1024**3)

    def nvmlDeviceGetClockInfo(self, h: int, kind: int) -> int:
        return int(self.SM[self._phase()][h] if kind == pynvml.NVML_CLOCK_SM else self.MEM[self._phase()])

    def nvmlDeviceGetMaxClockInfo(self, h: int, kind: int) -> int:
        assert kind == pynvml.NVML_CLOCK_SM
        if not self.max_clock:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return 1980

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        if not self.power:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return self.POWER_MW[self._phase()][h]

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        if not self.temperature:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return self.TEMP_C[self._phase()][h]

    def _events(self, h: int) -> int:
        if not self.events:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return self.EVENTS[self._phase()][h]

    def _no_function(self, h: int) -> int:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: int) -> int:
        self.older_calls += 1
        return self._events(h)

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[SimpleNamespace]:
        return []  # as NVML answers for pids of another PID namespace

    # The sample buffers (``sampling.gpu_buffer``): ``util_samples[gpu]`` = [(wall-clock s, busy %)],
    # ``proc_samples[gpu]`` = [(wall-clock s, pid, SM %)]; each call returns those newer than its timestamp, or
    # NVML_ERROR_NOT_FOUND where there is none. ``buffer``: "ok", "unsupported" (NVML_ERROR_NOT_SUPPORTED on both
    # calls), "double" (utilisation as NVML_VALUE_TYPE_DOUBLE).

    def nvmlDeviceGetSamples(self, h: int, kind: int, since_us: int) -> tuple[int, list[SimpleNamespace]]:
        assert kind == pynvml.NVML_GPU_UTILIZATION_SAMPLES
        self.buffer_calls += 1
        if self.buffer == "unsupported":
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        new = [(round(t * 1e6), v) for t, v in self.util_samples.get(h, []) if round(t * 1e6) > since_us]
        if not new:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        if self.buffer == "double":
            return pynvml.NVML_VALUE_TYPE_DOUBLE, [SimpleNamespace(timeStamp=t, sampleValue=SimpleNamespace(dVal=v))
                                                   for t, v in new]
        return pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, [
            SimpleNamespace(timeStamp=t, sampleValue=SimpleNamespace(uiVal=int(v))) for t, v in new]

    def nvmlDeviceGetProcessUtilization(self, h: int, since_us: int) -> list[SimpleNamespace]:
        if self.buffer == "unsupported":
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        new = [SimpleNamespace(timeStamp=round(t * 1e6), pid=pid, smUtil=int(u), memUtil=0)
               for t, pid, u in self.proc_samples.get(h, []) if round(t * 1e6) > since_us]
        if not new:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return new


def fake_nvml(monkeypatch: pytest.MonkeyPatch, fake: FakeNvml) -> None:
    monkeypatch.setattr(engine_fixtures.sampling.gpu, "pynvml", fake)
    monkeypatch.setattr(engine_fixtures.sampling.gpu_buffer, "pynvml", fake)
    monkeypatch.setattr(engine_fixtures.nvml, "pynvml", fake)

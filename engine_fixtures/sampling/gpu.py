"""NVIDIA GPU metrics through NVML (nvidia-ml-py): utilisation, memory, SM and memory clocks, power, temperature, the
clock-event (throttle) reasons that slowed the GPU, per-process memory. Clocks, power, temperature and the reasons are
telemetry (report-only: the suite never locks clocks or changes any GPU setting, it records what they were); a window
the GPU was slowed in is refused by the segment (``scenarios.segment``), not here.

NVML talks to the driver only; it never creates a CUDA context, so using it here does not initialise
CUDA in the test process. Where NVML cannot be loaded, ``available()`` returns the reason as a fact and
no GPU number is produced. GPU indices are NVML's (as ``nvidia-smi`` shows). The inventory of GPUs and
NVML's session live in ``engine_fixtures.nvml``.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType

import numpy as np
import pynvml

from engine_fixtures.errors import ConfigError
from engine_fixtures.nvml import MIB, NOT_COLLECTED, nvml_session, unavailable_reason
from engine_fixtures.sampling.base import TickedWindow, Ticker, require_closed
from engine_fixtures.sampling.clock_events import REASONS, slowing
from engine_fixtures.sampling.gpu_buffer import UtilBuffer
from engine_fixtures.sampling.series import Gauge

PidsFn = Callable[[], Mapping[str, Sequence[int]] | Sequence[int]]


class GpuSampler(TickedWindow):
    """Samples the GPUs ``indices`` every ``interval_s`` inside the window (ticks plus one at exit).

    Summary over all samples of all listed GPUs: ``gpu.util.mean/p50/p95`` (NVML utilisation %, each
    reading averages the driver's last sample period), ``gpu.mem_used_mib.max`` (peak on any listed
    GPU), ``gpu.sm_clock_mhz.mean``, ``gpu.mem_clock_mhz.mean``, ``gpu.power_w.mean``, ``gpu.temp_c.mean`` and
    ``gpu.temp_c.max`` (the GPU sensor, mean over the GPUs and readings, and the hottest reading of any),
    ``gpu.throttle.<reason>`` for each slowing clock-event reason (``sampling.clock_events.REASONS``: the fraction of
    readings in which any listed GPU reported it) and ``gpu.throttled_fraction`` (the fraction of readings in which
    any slowing reason was active on any listed GPU: a tensor-parallel engine runs at its slowest GPU's pace), and
    ``gpu.proc_mem_mib.<key>``: peak GPU memory summed over the key's pids, where ``pids_fn()``
    returns ``{role: pids}`` (key = role) or a list of pids (key = pid). NVML may not report per-process
    memory (no permission, or pids from another PID namespace); then no ``proc_mem`` metric is given
    and ``proc_mem_unavailable`` says why. From NVML's own sample buffers (``sampling.gpu_buffer``, drained at each
    tick): ``gpu.util_buffer.mean`` and ``gpu.util_buffer.periods`` (each driver period once), and
    ``gpu.sm_util.<key>`` (the key's processes' SM utilisation), where the driver gives them.

    Power, temperature and the clock-event reasons are given only where NVML reports them: the first
    ``NVML_ERROR_NOT_SUPPORTED`` on any listed GPU ends that field for the window (no number, never a zero), and
    ``unreported[field]`` says so once. The reasons are read with ``nvmlDeviceGetCurrentClocksEventReasons``, or
    ``nvmlDeviceGetCurrentClocksThrottleReasons`` where the binding or the driver predates it.
    """

    def __init__(self, indices: Sequence[int], pids_fn: PidsFn | None = None, interval_s: float = 0.1,
                 name: str = "gpu") -> None:
        if not indices:
            raise ConfigError("GpuSampler: give at least one GPU index (NVML numbering, as nvidia-smi shows)")
        self.name = name
        self.indices = tuple(indices)
        self.proc_mem_unavailable: str | None = None
        self._pids_fn = pids_fn
        self._ticker = Ticker(name, self._sample, interval_s)
        self._handles: list[object] = []
        self._buffer = UtilBuffer((), ())  # NVML's sample buffers of the listed GPUs, from the window's start
        self.unreported: dict[str, str] = {}  # field -> why NVML gives no number for it (said once)
        self._power_ok = True
        self._temp_ok = True
        self._events_ok = True
        self._events_old = False  # the driver predates nvmlDeviceGetCurrentClocksEventReasons
        self._util: list[float] = []
        self._mem: list[float] = []
        self._clock: list[float] = []
        self._max_sm: float | None = None
        self._power: list[float] = []
        self._proc_mem: dict[str, float] = {}
        self._nvml_pids: set[int] = set()
        self._closed = False
        self._failure: str | None = None
        self._exit = contextlib.ExitStack()
        self.util = Gauge()  # mean utilisation over the listed GPUs, per reading
        self.sm_clock = Gauge()  # mean SM clock (MHz) over the listed GPUs, per reading
        self.mem_clock = Gauge()  # mean memory clock (MHz)
        self.power = Gauge()  # mean power draw (W), while every listed GPU reports it
        self.temp = Gauge()  # mean GPU temperature (C) over the listed GPUs, while every one reports it
        self.temp_max = Gauge()  # the hottest listed GPU (C)
        self.throttle = {name: Gauge() for name in REASONS}  # 1.0 where any listed GPU reported the reason
        self.throttled = Gauge()  # 1.0 where any slowing reason was active on any listed GPU

    def available(self) -> str | None:
        try:
            with nvml_session():
                count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as exc:
            return unavailable_reason(exc)
        missing = [i for i in self.indices if not 0 <= i < count]
        if missing:
            return f"GPU indices {missing} requested but NVML sees {count} GPU(s); {NOT_COLLECTED}"
        return None

    def __enter__(self) -> GpuSampler:
        with contextlib.ExitStack() as stack:
            stack.enter_context(nvml_session())
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in self.indices]
            self._buffer = UtilBuffer(self._handles, self.indices)
            self._max_sm = self._max_sm_clock()
            self._exit = stack.pop_all()
        self._ticker.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._close_window(self._sample, self._exit.close)

    def _sample(self) -> None:
        per_pid: dict[int, float | None] = {}
        now = time.monotonic()
        self._buffer.drain()  # NVML's own periods since the last tick (sampling.gpu_buffer)
        for what, why in self._buffer.unreported.items():
            self.unreported.setdefault(what, why)
        util = [float(pynvml.nvmlDeviceGetUtilizationRates(h).gpu) for h in self._handles]
        self._util.extend(util)
        self.util.add(now, float(np.mean(util)))
        sm, mem_clock, power, temp = [], [], [], []
        active: set[str] = set()  # the slowing clock-event reasons on any listed GPU
        for index, h in zip(self.indices, self._handles, strict=True):
            self._mem.append(pynvml.nvmlDeviceGetMemoryInfo(h).used / MIB)
            sm.append(float(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)))
            mem_clock.append(float(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM)))
            if self._power_ok:
                try:
                    power.append(pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0)
                except pynvml.NVMLError_NotSupported:
                    self._power_ok = False
                    self._unreported("power", index, "gpu.power_w")
            if self._temp_ok:
                try:
                    temp.append(float(pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)))
                except pynvml.NVMLError_NotSupported:
                    self._temp_ok = False
                    self._unreported("temperature", index, "gpu.temp_c")
            if self._events_ok:
                try:
                    active.update(slowing(self._clock_events(h)))
                except pynvml.NVMLError_NotSupported:
                    self._events_ok = False
                    self._unreported(
                        "clock-event reasons", index, "gpu.throttle and gpu.throttled_fraction",
                        "; a window the GPU was slowed in cannot be told, so none is refused for it")
            if self._pids_fn is not None:
                for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
                    used = None if p.usedGpuMemory is None else p.usedGpuMemory / MIB
                    prev = per_pid.get(p.pid, 0.0)
                    per_pid[p.pid] = None if used is None or prev is None else prev + used
        self._clock.extend(sm)
        self.sm_clock.add(now, float(np.mean(sm)))
        self.mem_clock.add(now, float(np.mean(mem_clock)))
        if self._power_ok:
            self._power.extend(power)
            self.power.add(now, float(np.mean(power)))
        if self._temp_ok:
            self.temp.add(now, float(np.mean(temp)))
            self.temp_max.add(now, max(temp))
        if self._events_ok:
            for name, gauge in self.throttle.items():
                gauge.add(now, float(name in active))
            self.throttled.add(now, float(bool(active)))
        if self._pids_fn is not None:
            self._record_proc_mem(per_pid)

    def _max_sm_clock(self) -> float | None:
        """The listed GPUs' mean maximum SM clock (MHz), what a window's clock is compared with; None (said once)
        where NVML does not report it."""
        try:
            return float(np.mean([pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM) for h in self._handles]))
        except pynvml.NVMLError_NotSupported:
            self._unreported("maximum SM clock", self.indices[0], "gpu.sm_clock_max_mhz",
                             "; a window slowed by the power cap is refused whatever clock it kept")
            return None

    def _clock_events(self, handle: object) -> int:
        """The clock-event reason mask, through the older name where the binding or the driver lacks the newer."""
        read = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        if read is not None and not self._events_old:
            try:
                return int(read(handle))
            except pynvml.NVMLError_FunctionNotFound:
                self._events_old = True
        return int(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle))

    def _unreported(self, what: str, index: int, metrics: str, consequence: str = "") -> None:
        """Say once that NVML does not report ``what`` (the caller stops reading it)."""
        self.unreported.setdefault(what, f"NVML does not report the {what} of GPU {index} (NVML_ERROR_NOT_SUPPORTED): "
                                         f"no {metrics} numbers{consequence}")

    def _record_proc_mem(self, per_pid: Mapping[int, float | None]) -> None:
        self._nvml_pids.update(per_pid)
        for key, pids in self._roles().items():
            seen = [per_pid[p] for p in pids if p in per_pid]
            if not seen:
                continue
            if any(v is None for v in seen):
                self.proc_mem_unavailable = (f"NVML lists pids of {key!r} but without their memory "
                                             "(NVML_VALUE_NOT_AVAILABLE: no permission or not supported)")
                continue
            total = sum(v for v in seen if v is not None)
            self._proc_mem[key] = max(self._proc_mem.get(key, 0.0), total)

    def cut(self, t0: float, t1: float) -> dict[str, float]:
        """Over the readings inside ``[t0, t1)`` of a closed window: ``gpu.util.mean``, ``gpu.sm_clock_mhz.mean``,
        ``gpu.mem_clock_mhz.mean``, and where NVML reported them to the end of the segment (``unreported``)
        ``gpu.power_w.mean``, ``gpu.temp_c.mean``, ``gpu.temp_c.max``, ``gpu.throttle.<reason>`` and
        ``gpu.throttled_fraction`` (see the class docstring)."""
        require_closed(self.name, self._closed, self._failure)
        out = {"gpu.util.mean": float(self.util.between(t0, t1, "GPU utilisation").mean()),
               "gpu.sm_clock_mhz.mean": float(self.sm_clock.between(t0, t1, "GPU SM clock").mean()),
               "gpu.mem_clock_mhz.mean": float(self.mem_clock.between(t0, t1, "GPU memory clock").mean())}
        if self._max_sm is not None:
            out["gpu.sm_clock_max_mhz"] = self._max_sm
        if self._power_ok:
            out["gpu.power_w.mean"] = float(self.power.between(t0, t1, "GPU power").mean())
        if self._temp_ok:
            out["gpu.temp_c.mean"] = float(self.temp.between(t0, t1, "GPU temperature").mean())
            out["gpu.temp_c.max"] = float(self.temp_max.between(t0, t1, "GPU temperature").max())
        if self._events_ok:
            out.update({f"gpu.throttle.{name}": float(gauge.between(t0, t1, "GPU clock-event").mean())
                        for name, gauge in self.throttle.items()})
            out["gpu.throttled_fraction"] = float(self.throttled.between(t0, t1, "GPU clock-event").mean())
        out.update(self._buffer.cut(t0, t1, self._roles()))
        return out

    def _roles(self) -> dict[str, Sequence[int]]:
        wanted = self._pids_fn() if self._pids_fn is not None else {}
        return dict(wanted) if isinstance(wanted, Mapping) else {str(p): (p,) for p in wanted}

    def summary(self) -> dict[str, float]:
        require_closed(self.name, self._closed, self._failure)
        util = np.asarray(self._util)
        out = {
            "gpu.util.mean": float(util.mean()),
            "gpu.util.p50": float(np.percentile(util, 50)),
            "gpu.util.p95": float(np.percentile(util, 95)),
            "gpu.mem_used_mib.max": max(self._mem),
            "gpu.sm_clock_mhz.mean": float(np.mean(self._clock)),
            "gpu.mem_clock_mhz.mean": float(np.mean(self.mem_clock.values)),
        }
        if self._power_ok and self._power:
            out["gpu.power_w.mean"] = float(np.mean(self._power))
        if self._temp_ok and self.temp.values:
            out["gpu.temp_c.mean"] = float(np.mean(self.temp.values))
            out["gpu.temp_c.max"] = max(self.temp_max.values)
        if self._events_ok and self.throttled.values:
            out.update({f"gpu.throttle.{name}": float(np.mean(gauge.values)) for name, gauge in self.throttle.items()})
            out["gpu.throttled_fraction"] = float(np.mean(self.throttled.values))
        out.update(self._buffer.cut(-math.inf, math.inf, self._roles()))
        out.update({f"gpu.proc_mem_mib.{k}": v for k, v in sorted(self._proc_mem.items())})
        if self._pids_fn is not None and not self._proc_mem and self.proc_mem_unavailable is None:
            self.proc_mem_unavailable = (
                f"none of the sampled pids appear in NVML's compute process list {sorted(self._nvml_pids)} "
                "(not using the GPU, or NVML reports pids of another PID namespace)")
        return out

    @property
    def self_cpu_s(self) -> float:
        """CPU seconds the sampling thread itself used (its overhead)."""
        return self._ticker.self_cpu_s

    def wait_ticks(self, n: int, timeout_s: float) -> bool:
        """Block until ``n`` samples were taken inside the window (False on timeout or sampler failure)."""
        return self._ticker.wait_ticks(n, timeout_s)


"""NVML's own sample buffers, read at their native rate (issue 46: a GPU-busy estimator that can decide).

The driver keeps a ring of recent samples: GPU utilisation, each sample the busy share of one driver sample period
(1/6 s to 1 s, by product), through ``nvmlDeviceGetSamples(handle, NVML_GPU_UTILIZATION_SAMPLES, since_us)``; and per
process the SM utilisation of each period, through ``nvmlDeviceGetProcessUtilization(handle, since_us)``. A 10 Hz
poll of ``nvmlDeviceGetUtilizationRates`` reads the latest period several times and weighs periods by chance; the
buffer gives each period once, with the driver's own timestamp.

``UtilBuffer(handles, indices)``:

- ``drain()`` reads what is new on every listed GPU since the last read (the GPU sampler calls it at each tick, well
  inside the ring's span); the driver's timestamps (microseconds, wall clock) become ``time.monotonic()`` seconds,
  so a window ``[t0, t1)`` of the load's clock selects them;
- ``cut(t0, t1, roles)``: ``gpu.util_buffer.mean`` (the mean of the periods that ended inside, over the listed GPUs),
  ``gpu.util_buffer.periods`` (how many), and for each role of ``roles`` ({role: pids}) whose processes NVML lists,
  ``gpu.sm_util.<role>`` (each of the role's processes' mean SM utilisation over its periods inside, summed);
- ``unreported``: why a field gives no number (NVML_ERROR_NOT_SUPPORTED, or an error reading it), said once; the
  field is then no longer read and never reads as a zero. A window with no period inside gives no number either.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import numpy as np
import pynvml

_US = 1e-6
_VALUE_FIELD = {pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal", pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
                pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal", pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
                pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal", pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal"}


class UtilBuffer:
    """The listed GPUs' sample buffers from now on (see the module docstring); a reader with state, not a value."""

    def __init__(self, handles: Sequence[object], indices: Sequence[int]) -> None:
        self.handles = tuple(handles)
        self.indices = tuple(indices)
        self.unreported: dict[str, str] = {}  # field -> why NVML gives no number for it (said once)
        self._offset = time.time() - time.monotonic()  # wall clock - monotonic, seconds
        start_us = int((time.monotonic() + self._offset) / _US)  # periods before the buffer existed are not read
        self._since = dict.fromkeys(self.indices, start_us)  # per GPU: the last device timestamp read (us)
        self._proc_since = dict.fromkeys(self.indices, start_us)
        self._util: dict[int, list[tuple[float, float]]] = {i: [] for i in self.indices}  # (monotonic s, busy %)
        self._sm: dict[int, list[tuple[float, int, float]]] = {i: [] for i in self.indices}  # (monotonic s, pid, SM %)

    def _mono(self, stamp_us: int) -> float:
        return stamp_us * _US - self._offset

    def drain(self) -> None:
        for index, handle in zip(self.indices, self.handles, strict=True):
            if "utilisation samples" not in self.unreported:
                self._drain_util(index, handle)
            if "per-process utilisation" not in self.unreported:
                self._drain_processes(index, handle)

    def _drain_util(self, index: int, handle: object) -> None:
        try:
            kind, samples = pynvml.nvmlDeviceGetSamples(handle, pynvml.NVML_GPU_UTILIZATION_SAMPLES,
                                                        self._since[index])
        except pynvml.NVMLError as exc:
            if _no_new_samples(exc):
                return
            self._stop("utilisation samples", index, exc, "gpu.util_buffer")
            return
        name = _VALUE_FIELD.get(kind)
        if name is None:
            self.unreported["utilisation samples"] = f"NVML gave GPU {index}'s utilisation samples as value type " \
                                                     f"{kind}, which this reader does not know: no gpu.util_buffer"
            return
        for s in samples:
            if s.timeStamp > self._since[index]:
                self._util[index].append((self._mono(s.timeStamp), float(getattr(s.sampleValue, name))))
                self._since[index] = s.timeStamp

    def _drain_processes(self, index: int, handle: object) -> None:
        try:
            samples = pynvml.nvmlDeviceGetProcessUtilization(handle, self._proc_since[index])
        except pynvml.NVMLError as exc:
            if _no_new_samples(exc):
                return
            self._stop("per-process utilisation", index, exc, "gpu.sm_util")
            return
        since = self._proc_since[index]  # one sample per process and period, each with its own timestamp
        self._sm[index].extend((self._mono(s.timeStamp), int(s.pid), float(s.smUtil)) for s in samples
                               if s.timeStamp > since)
        self._proc_since[index] = max([since, *(s.timeStamp for s in samples)])

    def _stop(self, what: str, index: int, exc: pynvml.NVMLError, metrics: str) -> None:
        why = "NVML_ERROR_NOT_SUPPORTED" if isinstance(exc, pynvml.NVMLError_NotSupported) else f"NVML error: {exc}"
        self.unreported[what] = f"NVML does not give the {what} of GPU {index} ({why}): no {metrics} numbers"

    def cut(self, t0: float, t1: float, roles: Mapping[str, Sequence[int]] | None = None) -> dict[str, float]:
        out: dict[str, float] = {}
        if "utilisation samples" not in self.unreported:
            per_gpu = [[v for t, v in self._util[i] if t0 <= t < t1] for i in self.indices]
            if all(per_gpu):
                out["gpu.util_buffer.mean"] = float(np.mean([np.mean(v) for v in per_gpu]))
                out["gpu.util_buffer.periods"] = float(sum(len(v) for v in per_gpu))
        if roles and "per-process utilisation" not in self.unreported:
            for role, pids in roles.items():
                per_pid: dict[tuple[int, int], list[float]] = {}
                for i in self.indices:
                    for t, pid, util in self._sm[i]:
                        if t0 <= t < t1 and pid in pids:
                            per_pid.setdefault((i, pid), []).append(util)
                if per_pid:  # each process's mean SM share over its periods inside, summed over the role
                    out[f"gpu.sm_util.{role}"] = float(sum(np.mean(v) for v in per_pid.values()))
        return out


def _no_new_samples(exc: pynvml.NVMLError) -> bool:
    """NVML_ERROR_NOT_FOUND: no sample newer than the timestamp given (an idle GPU, or a read soon after the last)."""
    return isinstance(exc, pynvml.NVMLError_NotFound)

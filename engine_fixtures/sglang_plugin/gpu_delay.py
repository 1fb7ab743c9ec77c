"""A GPU delay of a known length for the GPU named patches (``patches.GPU_SLEEP``): ``torch.cuda._sleep(cycles)``.

``torch.cuda._sleep`` launches one single-thread kernel on the current CUDA stream that spins until the SM's cycle
counter (``clock64()``) has advanced by ``cycles``. Enqueued on the stream a forward runs on, just before the forward
launches its own kernels (or replays its CUDA graph, which the sleep stays outside of), it holds every later kernel of
that stream back: GPU time on the step's critical path, whatever the CPU does meanwhile.

Cycles per millisecond are the SM clock in kHz, read once per process at the first delay (``cuda_sleep``), when
SGLang has set the device: ``cycles = round(ms * clock_khz)``. The clock is CUDA's ``cudaDevAttrClockRate`` (torch's
``get_device_properties(device).clock_rate``, kHz), the device's peak SM clock; a torch without it gets NVML's current
SM clock (``torch.cuda.clock_rate``, MHz, sampled at that first delay). The approximation: the kernel counts cycles,
not time, so it lasts ``ms * clock / actual clock``: exactly ``ms`` while the SM runs at the clock read, longer when
it runs below it (power or thermal limits, an idle clock), shorter if it boosts above a sampled current clock. The
realised effect is therefore measured on a live arm (the candidate's TPOT against the same engine at 0 ms) before an
A/B relies on the size, as with every patch.

A delay is never enqueued while the stream is capturing a CUDA graph (it would become part of the graph, at a fixed
size): ``CudaSleep.__call__`` says so by returning False. This module imports torch only inside its functions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

PEAK_CLOCK = "cudaDevAttrClockRate (torch device properties clock_rate: the peak SM clock)"
NVML_CLOCK = "NVML's current SM clock (torch.cuda.clock_rate), sampled at the first delay"


def _torch_cuda() -> Any:
    import torch

    return torch.cuda


def cuda_unavailable(cuda: Any = None) -> str | None:
    """Why no GPU delay can be enqueued in this process; None when ``torch.cuda`` can. Creates no CUDA context
    (``is_available`` asks the driver for the device count only). ``cuda``: ``torch.cuda`` unless given."""
    if cuda is None:
        try:
            cuda = _torch_cuda()
        except Exception as exc:
            return f"torch is not importable here ({exc!r})"
    try:
        available = bool(cuda.is_available())
    except Exception as exc:
        return f"torch.cuda.is_available() failed ({exc!r})"
    if not available:
        return "torch.cuda is not available here (no visible CUDA device, or a torch built without CUDA)"
    if not callable(getattr(cuda, "_sleep", None)):
        return "this torch has no torch.cuda._sleep"
    return None


@dataclass(frozen=True)
class CudaSleep:
    """Enqueues ``ms`` milliseconds of GPU time on the current stream of ``device`` (module docstring)."""

    device: int
    clock_khz: float  # SM clock in kHz: cycles per millisecond
    source: str  # where the clock was read
    sleep: Callable[[int], None]  # torch.cuda._sleep
    capturing: Callable[[], bool]  # torch.cuda.is_current_stream_capturing

    def cycles(self, ms: float) -> int:
        return max(0, round(ms * self.clock_khz))

    def __call__(self, ms: float) -> bool:
        """Enqueue the delay; False (nothing enqueued) while the current stream is capturing a CUDA graph."""
        cycles = self.cycles(ms)
        if cycles <= 0:
            return True
        if self.capturing():
            return False
        self.sleep(cycles)
        return True

    def describe(self) -> str:
        return (f"torch.cuda._sleep on the current stream of cuda:{self.device}: {self.clock_khz / 1000:g} MHz from "
                f"{self.source}, {self.cycles(1.0)} cycles per ms")


def cuda_sleep(cuda: Any = None) -> CudaSleep:
    """The delay for this process's current device, its clock read now (module docstring). ``cuda``: ``torch.cuda``
    unless given. RuntimeError when no clock can be read."""
    cuda = _torch_cuda() if cuda is None else cuda
    device = int(cuda.current_device())
    khz = float(getattr(cuda.get_device_properties(device), "clock_rate", 0) or 0)
    source = PEAK_CLOCK
    if khz <= 0:
        try:
            khz, source = float(cuda.clock_rate(device)) * 1000.0, NVML_CLOCK
        except Exception as exc:
            raise RuntimeError(f"cannot read the SM clock of cuda:{device}: torch's device properties have no "
                               f"clock_rate and NVML's failed ({exc!r})") from None
    if khz <= 0:
        raise RuntimeError(f"cannot read the SM clock of cuda:{device}: {source} is {khz:g} kHz")
    return CudaSleep(device, khz, source, cuda._sleep, cuda.is_current_stream_capturing)

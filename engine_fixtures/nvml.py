"""NVML (nvidia-ml-py) for the whole suite: which GPUs this process may use, and why NVML is unavailable.

NVML talks to the driver only; it never creates a CUDA context, so nothing here initialises CUDA in the
test process. Used by the machine facts (``machine.py``), the GPU skip reasons (``marks.py``) and the GPU
sampler (``sampling/gpu.py``).

- ``gpu_inventory() -> list[GpuInfo] | str``: NVML's devices filtered by ``CUDA_VISIBLE_DEVICES``, or why none.
- ``nvml_session()``: ``nvmlInit`` ... ``nvmlShutdown``; ``nvml_reason()``: None if NVML initialises here.
- ``unavailable_reason(exc)``: an ``NVMLError`` as a fact for the report (``NOT_COLLECTED`` appended).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass

import pynvml

MIB = 1024 * 1024
NOT_COLLECTED = "GPU metrics are not collected"


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as NVML reports it."""

    index: int
    name: str
    memory_total_mib: float
    driver: str
    uuid: str


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def unavailable_reason(exc: pynvml.NVMLError) -> str:
    """Why NVML failed, as a fact for the report (``NOT_COLLECTED`` appended)."""
    if isinstance(exc, pynvml.NVMLError_LibraryNotFound):
        fact = "libnvidia-ml.so.1 not found (NVIDIA driver not installed)"
        return f"NVML not available: {fact}; {NOT_COLLECTED}"
    if isinstance(exc, pynvml.NVMLError_DriverNotLoaded):
        fact = "the NVIDIA kernel driver is not loaded (check with nvidia-smi)"
        return f"NVML not available: {fact}; {NOT_COLLECTED}"
    if isinstance(exc, pynvml.NVMLError_NoPermission):
        return f"NVML not available: no permission to open /dev/nvidia* ({exc}); {NOT_COLLECTED}"
    return f"NVML not available: {exc}; {NOT_COLLECTED}"


@contextlib.contextmanager
def nvml_session() -> Iterator[None]:
    """``nvmlInit`` ... ``nvmlShutdown`` (NVML reference-counts these, so nesting is fine)."""
    pynvml.nvmlInit()
    try:
        yield
    finally:
        pynvml.nvmlShutdown()


def nvml_reason() -> str | None:
    """None if NVML can be initialised here, else why not (a fact, stated for the report)."""
    try:
        with nvml_session():
            return None
    except pynvml.NVMLError as exc:
        return unavailable_reason(exc)


def _cuda_visible(infos: list[GpuInfo], env: str | None) -> list[GpuInfo]:
    """The subset of ``infos`` that ``CUDA_VISIBLE_DEVICES`` (indices or GPU-UUID prefixes) exposes."""
    if env is None:
        return infos
    chosen: list[GpuInfo] = []
    for item in (x.strip() for x in env.split(",")):
        if not item:
            break  # CUDA stops at the first empty/invalid entry
        match = [g for g in infos if (item.isdigit() and g.index == int(item)) or
                 (item.startswith("GPU-") and g.uuid.startswith(item))]
        if not match:
            break
        chosen.extend(g for g in match if g not in chosen)
    return chosen


def gpu_inventory() -> list[GpuInfo] | str:
    """The GPUs this process may use (NVML devices filtered by ``CUDA_VISIBLE_DEVICES``), or why none."""
    try:
        with nvml_session():
            driver = _text(pynvml.nvmlSystemGetDriverVersion())
            infos = []
            for i in range(pynvml.nvmlDeviceGetCount()):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                infos.append(GpuInfo(i, _text(pynvml.nvmlDeviceGetName(h)),
                                     pynvml.nvmlDeviceGetMemoryInfo(h).total / MIB, driver,
                                     _text(pynvml.nvmlDeviceGetUUID(h))))
    except pynvml.NVMLError as exc:
        return unavailable_reason(exc)
    return _cuda_visible(infos, os.environ.get("CUDA_VISIBLE_DEVICES"))


def memory_mib(index: int) -> tuple[float, float] | None:
    """``(total, free)`` MiB of NVML device ``index`` (an index NVML counts, not a CUDA ordinal), or None where
    NVML cannot say (no GPU, no driver)."""
    try:
        with nvml_session():
            info = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(index))
    except pynvml.NVMLError:
        return None
    return info.total / MIB, info.free / MIB

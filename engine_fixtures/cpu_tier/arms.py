"""The mechanism benchmark's arm spec and Qwen2.5-VL's pixel_values shape.

Shape formula (Qwen2.5-VL ``smart_resize`` + patchify, temporal patch 2, patch 14, merge 2):
``side' = round(side / 28) * 28``; patches = ``(h'/14) * (w'/14)``; each patch holds
``3 channels * 2 frames * 14 * 14 = 1176`` float32 values. 512 -> 504 -> 1296 x 1176 (6.1 MB),
1024 -> 1036 -> 5476 x 1176 (25.8 MB), 2048 -> 2044 -> 21316 x 1176 (100.3 MB).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from engine_fixtures.errors import ConfigError
from engine_fixtures.quota import checked_cores, quota_text
from engine_fixtures.transport.arms import ARMS, CONTROL_ARM, COPY_ARMS, TransportArm

PATCH = 14
GRID = 28
PATCH_VALUES = 3 * 2 * PATCH * PATCH  # 1176
THREAD_ARMS = ("cpus", "64", "capped8", "1")
AUTHKEY_ENV = "PERF_MECH_AUTHKEY"  # the consumer connection's authkey (hex), kept out of argv


def grid_side(side: int) -> int:
    return max(GRID, round(side / GRID) * GRID)


def pixel_shape(resolution: int) -> tuple[int, int]:
    """(patches, 1176) of a square ``resolution`` image."""
    side = grid_side(resolution) // PATCH
    return side * side, PATCH_VALUES


def visible_cpus() -> int:
    return len(os.sched_getaffinity(0))


SGLANG_ARM = "sglang"  # SGLang's own ShmPointerMMData as the installed release ships it
CPU_TIER_ARMS: tuple[str, ...] = (*COPY_ARMS, CONTROL_ARM, SGLANG_ARM)


def transport_arm(copy: str) -> TransportArm:
    """The registry's arm (``transport.arms``) of a CPU-tier copy arm: ``sglang`` as shipped, else an SHM copy."""
    return ARMS[SGLANG_ARM if copy == SGLANG_ARM else f"shm-{copy}"]


@dataclass(frozen=True)
class CpuTierArm:
    """One arm: copy arm (``torch``, ``buffer``, the ``control`` yardstick or SGLang's own ``sglang``), producer
    intra-op threads, CPU quota (None: none), resolution, concurrency."""

    copy: str = "torch"
    threads: str = "cpus"
    quota: float | None = None
    resolution: int = 1024
    concurrency: int = 4
    wait_policy: str = "default"  # "passive" sets OMP_WAIT_POLICY=PASSIVE in the producer

    def __post_init__(self) -> None:
        if self.copy not in CPU_TIER_ARMS:
            raise ConfigError(f"unknown CPU-tier copy arm {self.copy!r}: use one of {', '.join(CPU_TIER_ARMS)}")
        if self.threads not in THREAD_ARMS:
            raise ConfigError(f"unknown thread arm {self.threads!r}: use one of {', '.join(THREAD_ARMS)}")
        if self.wait_policy not in ("default", "passive"):
            raise ConfigError(f"unknown wait policy {self.wait_policy!r}: use 'default' or 'passive'")
        checked_cores(self.quota, "CpuTierArm quota")
        if self.resolution < GRID or self.concurrency < 1:
            raise ConfigError(f"resolution must be >= {GRID} and concurrency >= 1, got {self}")

    def thread_count(self) -> int:
        cpus = visible_cpus()
        return {"cpus": cpus, "64": 64, "capped8": min(8, cpus), "1": 1}[self.threads]

    @property
    def axes(self) -> dict[str, str]:
        axes = {"copy": self.copy, "threads": self.threads, "quota": quota_text(self.quota),
                "res": str(self.resolution), "c": str(self.concurrency)}
        if self.wait_policy != "default":
            axes["wait"] = self.wait_policy
        return axes

    @property
    def id(self) -> str:
        """Readable test id, e.g. ``copy=torch-threads=cpus-quota=0.5-res=1024-c=4``."""
        return "-".join(f"{k}={v}" for k, v in self.axes.items())

    @property
    def scenario(self) -> str:
        return "mech/" + "/".join(f"{k}={v}" for k, v in self.axes.items())

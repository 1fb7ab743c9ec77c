"""cgroup CPU values as the kernel writes them: ``cpu.max`` text (v2), quota microseconds, ``cpu.stat`` pairs, and
the cumulative accounting of one cgroup (``CpuStat``). Pure parsing; ``isolation.cgroups`` re-exports these."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine_fixtures.quota import checked_cores

PERIOD_US = 100_000


@dataclass(frozen=True)
class CpuStat:
    """Cumulative CPU accounting of one cgroup; ``after - before`` gives the window's delta."""

    usage_s: float
    nr_periods: int
    nr_throttled: int
    throttled_s: float

    def __sub__(self, other: CpuStat) -> CpuStat:
        return CpuStat(self.usage_s - other.usage_s, self.nr_periods - other.nr_periods,
                       self.nr_throttled - other.nr_throttled, self.throttled_s - other.throttled_s)


def _read_kv(path: Path) -> dict[str, int]:
    pairs = (line.split() for line in path.read_text().splitlines())
    return {p[0]: int(p[1]) for p in pairs if len(p) == 2 and p[1].lstrip("-").isdigit()}


def parse_cpu_max(text: str) -> float | None:
    """``"max 100000"`` -> None, ``"50000 100000"`` -> 0.5 cores."""
    quota, _, period = text.strip().partition(" ")
    if quota == "max":
        return None
    return int(quota) / int(period or PERIOD_US)


def format_cpu_max(cores: float | None, period_us: int = PERIOD_US) -> str:
    """Inverse of ``parse_cpu_max``: None -> ``"max 100000"``, 0.5 -> ``"50000 100000"``."""
    return f"max {period_us}" if cores is None else f"{_quota_us(cores, period_us)} {period_us}"


def _quota_us(cores: float, period_us: int) -> int:
    checked = checked_cores(cores, "a CPU quota")
    return max(1000, round(checked * period_us))  # the kernel's minimum quota is 1 ms

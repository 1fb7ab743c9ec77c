"""Known faults and slowdowns that prove the gates: a CPU spin, and ``--perf-inject`` for the mechanism tier.

``--perf-inject`` (``PERF_INJECT``) takes comma-separated items:

- ``slow:ARM=MS``  the mechanism producer of copy arm ARM spins MS ms of CPU per request, inside its quota;
- ``copy:ARM=IMPL`` the mechanism arm ARM copies with IMPL instead (``copy:buffer=torch`` forces the torch
  copy into the buffer arm, so the invariant that the buffer copy beats torch's must fail).

Results measured with an injection carry it in their metadata, the verdict table says so, and no baseline is
ever recorded from them. The engine tier's equivalent is a named patch (``sglang_plugin.patches``), carried
by a build (``--perf-reference patch:...``). This module imports only the standard library.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


def spin(ms: float) -> None:
    """Burn ``ms`` milliseconds of this thread's time in a busy loop (a sleep would burn no CPU or quota)."""
    if ms <= 0:
        return
    end = time.perf_counter() + ms / 1000.0
    while time.perf_counter() < end:
        pass


@dataclass(frozen=True)
class Injection:
    """Parsed ``--perf-inject``: per-arm spin milliseconds and per-arm forced copy implementations."""

    slow_ms: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    copy: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def __bool__(self) -> bool:
        return bool(self.slow_ms or self.copy)

    def describe(self) -> str:
        parts = [f"slow:{a}={ms:g}" for a, ms in sorted(self.slow_ms.items())]
        parts += [f"copy:{a}={impl}" for a, impl in sorted(self.copy.items())]
        return ",".join(parts)

    def for_arm(self, arm: str) -> tuple[str, float]:
        """(copy implementation, spin ms) the producer of ``arm`` uses."""
        return self.copy.get(arm, arm), self.slow_ms.get(arm, 0.0)


def parse_injection(text: str) -> Injection:
    """``"slow:torch=6,copy:buffer=torch"`` -> Injection; ValueError names the accepted forms."""
    slow: dict[str, float] = {}
    copy: dict[str, str] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        kind, colon, rest = item.partition(":")
        arm, eq, value = rest.partition("=")
        if not colon or not eq or not arm or not value or kind not in ("slow", "copy"):
            raise ValueError(f"{item!r}: expected slow:ARM=MS or copy:ARM=IMPL (e.g. slow:torch=6,copy:buffer=torch)")
        if kind == "slow":
            try:
                ms = float(value)
            except ValueError:
                raise ValueError(f"{item!r}: MS must be a number of milliseconds") from None
            if ms < 0:
                raise ValueError(f"{item!r}: MS must be >= 0")
            slow[arm] = ms
        else:
            copy[arm] = value
    return Injection(MappingProxyType(slow), MappingProxyType(copy))

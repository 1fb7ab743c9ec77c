"""CPU quotas, parsed once: the one ">0 cores" check, the one text form, a scenario's ``"quarter"`` and the
``--perf-cpu-quota`` setting. Both tiers, the cgroup sandboxes and the samplers read quotas through here.

- ``checked_cores(value, what)``: None (no quota) or cores > 0 as a float; ``QuotaError`` naming WHAT otherwise.
- ``declared_cores(value, what)``: a scenario's quota: None, cores, or ``"quarter"`` (a quarter of the visible
  CPUs, at least one core: 4 of the H200's 16, the setting that reproduced the seed's copy regression).
- ``quota_text(cores)``: ``"none"`` or ``f"{cores:g}"``, the form in scenario ids and keys (``quota=0.5``).
- ``QuotaSetting``: ``--perf-cpu-quota``: ``auto`` (each arm's own quota), ``none`` (quota arms skip, never run
  without the quota they are reported under) or cores (the GPU tier's engines run under it).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from engine_fixtures.errors import QuotaError

FIX = "pass None (no quota) or a number of cores > 0"


def checked_cores(value: object, what: str) -> float | None:
    if value is None:
        return None
    try:
        cores = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise QuotaError(f"{what} must be > 0 or None (no quota), got {value!r}: {FIX}") from None
    if isinstance(value, bool) or not cores > 0 or math.isinf(cores):
        raise QuotaError(f"{what} must be > 0 or None (no quota), got {value!r}: a CPU quota is > 0 cores; {FIX}")
    return cores


def declared_cores(value: str | float | None, what: str) -> float | None:
    if value == "quarter":
        return max(1.0, len(os.sched_getaffinity(0)) / 4)
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise QuotaError(f"{what} {value!r}: use None, 'quarter' or a number of cores > 0") from None
    return checked_cores(value, what)


def quota_text(cores: float | None) -> str:
    return "none" if cores is None else f"{cores:g}"


@dataclass(frozen=True)
class QuotaSetting:
    """``--perf-cpu-quota``, parsed at start-up (``QuotaSetting.parse`` is the option's parser)."""

    mode: str = "auto"  # auto | none | cores
    cores: float | None = None

    @classmethod
    def parse(cls, text: str) -> QuotaSetting:
        low = text.strip().lower()
        if low in ("auto", "none"):
            return cls(low)
        try:
            number = float(low)
        except ValueError:
            number = math.nan
        if not 0 < number < math.inf:  # the CLI's spelling, not checked_cores' Python one (None)
            raise ValueError(f"expected 'auto', 'none' or a number of cores > 0, got {text!r}")
        return cls("cores", number)

    def __str__(self) -> str:
        return self.mode if self.cores is None else f"{self.cores:g}"

    def skip_reason(self, declared: float | None, source: str) -> str | None:
        """Why an arm declared under ``declared`` cores does not run under this setting, or None."""
        if self.mode == "none" and declared is not None:
            return (f"this arm measures under a {declared:g}-core CPU quota, and quotas are disabled "
                    f"(--perf-cpu-quota none from {source}); drop that option to run it")
        return None

    def applied(self, declared: float | None) -> float | None:
        """The quota an arm runs under: its own (auto, none), or the setting's cores."""
        return self.cores if self.mode == "cores" else declared

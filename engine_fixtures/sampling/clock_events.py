"""NVML's clock-event (throttle) reasons that slow a GPU, by name, with their bits from nvidia-ml-py's constants.

NVML reports why the clocks are below their maximum as a bit mask (``nvmlDeviceGetCurrentClocksEventReasons``; older
bindings call it ``nvmlDeviceGetCurrentClocksThrottleReasons`` and its constants ``nvmlClocksThrottleReason*``, with
the same bits). Five bits mean the GPU was *slowed* by heat or power, which is what a measurement window must know:

- ``hw_slowdown``: the hardware halved the clocks or worse (thermal, power brake or a power supply alarm);
- ``hw_thermal_slowdown``: the hardware slowdown, for heat;
- ``hw_power_brake_slowdown``: the hardware slowdown, asserted by an external power brake (the system's power supply);
- ``sw_thermal_slowdown``: the driver lowered the clocks to keep the GPU below its temperature limit;
- ``sw_power_cap``: the driver lowered the clocks to keep the board under its power limit.

The other bits are not slowdowns of the work: ``GpuIdle`` (nothing to run), ``ApplicationsClocksSetting`` /
``UserDefinedClocks`` (clocks set by an administrator: the suite never sets them), ``SyncBoost`` (held to a
group's clock), ``DisplayClockSetting``; they are never counted. ``slowing(mask)`` names the slowing bits set in a mask.
"""

from __future__ import annotations

import pynvml


def _bit(name: str) -> int:
    """The bit of ``name`` (``HwSlowdown``) under the binding's current constant name, else its older one."""
    value = getattr(pynvml, f"nvmlClocksEventReason{name}", None)
    return int(value if value is not None else getattr(pynvml, f"nvmlClocksThrottleReason{name}"))


SLOWING: tuple[tuple[str, int], ...] = (
    ("hw_slowdown", _bit("HwSlowdown")),
    ("hw_thermal_slowdown", _bit("HwThermalSlowdown")),
    ("hw_power_brake_slowdown", _bit("HwPowerBrakeSlowdown")),
    ("sw_thermal_slowdown", _bit("SwThermalSlowdown")),
    ("sw_power_cap", _bit("SwPowerCap")),
)
REASONS: tuple[str, ...] = tuple(name for name, _ in SLOWING)
HARDWARE: tuple[str, ...] = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")  # clocks halved


def slowing(mask: int) -> tuple[str, ...]:
    """The slowing reasons (``REASONS``) whose bit is set in ``mask``."""
    return tuple(name for name, bit in SLOWING if mask & bit)

"""Which measured windows count toward no verdict: the host or the GPU was not itself during them.

A window is **refused** (``window_refusal``: the reason, or None) when

- **the GPU was slowed** by heat or power in more than ``MAX_THROTTLED_FRACTION`` of its readings, by the hardware
  (clocks halved) or by the driver at a cost of more than ``MAX_CLOCK_LOSS`` of its maximum SM clock
  (``gpu_sm_clock_max_mhz``; unknown: refused) (``throttle_refusal``); or
- **the host's hypervisor stole** more than ``MAX_STEAL_FRACTION`` of the CPUs' time in it (``steal_refusal``,
  ``sampling.host``): the vCPUs the tokenizer's image preprocessing and the client run on were not there, and every
  arm served then is slower alike.

A refused window keeps only its telemetry (``TELEMETRY``: what it was refused for), so none of its judged values
counts toward a verdict, a figure or a pool (``scenarios.segment``); the runner names each visit that had one among
the run's findings (``scenarios.results.refusal_finding``).
"""

from __future__ import annotations

from collections.abc import Mapping

from engine_fixtures.judge.metrics import metric
from engine_fixtures.sampling.clock_events import HARDWARE, REASONS

# A window in which the GPU was slowed by heat or power (any of NVML's slowing clock-event reasons, on any of the
# arm's GPUs) in more than this share of its readings is refused. The reasons are read as instants, ten times a
# second: over a 3 s window one reading is 3.3 %, so one stray reading is tolerated and a second refuses the window.
# A slowdown for 5 % of a window costs at most about that much of its speed (less under the power cap, which trims a
# few percent of clock, more under a hardware slowdown, which halves it), which is the size of the effects the
# contrasts resolve: a window above it would carry the GPU's state into the verdict.
MAX_THROTTLED_FRACTION = 0.05
MAX_CLOCK_LOSS = 0.05  # a slowdown the driver manages refuses a window only where it cost more SM clock than this
# Steal above this share of the CPUs' time costs the CPU-bound part of a request (the cpu transport's preprocessing,
# the copy) about as much, the size of the effects the contrasts resolve (the same 5 % as the GPU's rule).
DEFAULT_MAX_STEAL = 0.05
MAX_STEAL_FRACTION = DEFAULT_MAX_STEAL  # this process's limit: --perf-max-steal (``configure_steal``)
TELEMETRY = ("gpu_", "host_")  # the diagnostics a refused window keeps


def clock_loss(values: Mapping[str, float]) -> float | None:
    """How far the window's mean SM clock stayed below the GPU's maximum (a fraction), None where unknown."""
    clock, top = values.get("gpu_sm_clock_mhz_mean"), values.get("gpu_sm_clock_max_mhz")
    return max(0.0, 1.0 - clock / top) if clock is not None and top else None


def throttle_refusal(values: Mapping[str, float]) -> str | None:
    """Why the window with ``values`` is refused for the GPU, or None: kept, or NVML did not report the reasons.
    Refused: the GPU slowed by heat or power in more than ``MAX_THROTTLED_FRACTION`` of its readings, naming each
    reason's share, unless only the driver slowed it (power cap, SW thermal) and the window's SM clock stayed within
    ``MAX_CLOCK_LOSS`` of the GPU's maximum: an H200 whose driver asserts its power cap at half its power limit
    holds 1953 of 1980 MHz (H200 2026-12-04), which is not a slowed measurement."""
    slowed = values.get("gpu_throttled_fraction")
    if slowed is None or slowed <= MAX_THROTTLED_FRACTION:
        return None
    shares = {name: values.get(f"gpu_throttle_{name}", 0.0) for name in REASONS}
    loss = clock_loss(values)
    hardware = max(shares[name] for name in HARDWARE)
    if hardware <= MAX_THROTTLED_FRACTION and loss is not None and loss <= MAX_CLOCK_LOSS:
        return None
    reasons = ", ".join(f"{name} {share:.0%}" for name, share in shares.items() if share > 0)
    lost = f"; its SM clock {loss:.1%} below the maximum" if loss is not None else ""
    return (f"the GPU was slowed by heat or power in {slowed:.0%} of its readings ({reasons}), more than "
            f"{MAX_THROTTLED_FRACTION:.0%}{lost}")


def configure_steal(limit: float) -> float:
    """Set the steal time above which this process refuses a window (``--perf-max-steal``, set by the plugin at
    start, as ``cgroups.configure_parent``); returns the previous limit."""
    global MAX_STEAL_FRACTION
    previous, MAX_STEAL_FRACTION = MAX_STEAL_FRACTION, limit
    return previous


def steal_refusal(values: Mapping[str, float]) -> str | None:
    """Why the window is refused for the host's steal time, or None (kept, or no steal reading)."""
    steal = values.get("host_steal_fraction")
    if steal is None or steal <= MAX_STEAL_FRACTION:
        return None
    return (f"the hypervisor stole {steal:.1%} of the host's CPU time in it, more than {MAX_STEAL_FRACTION:.0%} "
            "(sampling.host)")


def window_refusal(values: Mapping[str, float]) -> str | None:
    """Why the window is refused (the GPU slowed, the host stolen from), or None: it counts."""
    return throttle_refusal(values) or steal_refusal(values)


def telemetry_only(values: Mapping[str, float]) -> dict[str, float]:
    """What a refused window keeps: its GPU and host telemetry, none of its judged values."""
    return {k: v for k, v in values.items() if k.startswith(TELEMETRY) and not metric(k).judged}

"""The one metric registry: unit, direction, tolerance and whether a metric gates.

Contract:
- ``direction`` is exactly one of ``"higher"`` (bigger is better), ``"lower"`` (smaller is better)
  or ``"none"`` (report only, no good direction). A gated metric never has ``"none"`` and always has a
  tolerance > 0 (TensorRT-LLM #18741 gated TPOT as "higher is better" and missed a 2.5x slowdown).
- ``tolerance`` is relative: ``0.10`` means a 10 % move in the bad direction may be a regression.
- Role-parameterised names such as ``cpu_cores.scheduler`` resolve through ``PATTERNS``: the
  template's name ends in ``.<role>`` and the role is any non-empty ``[A-Za-z0-9_-]+`` word.
- ``metric(name)`` raises ``UnknownMetric`` (a ``KeyError`` and a ``PerfError``) listing known names.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Literal

from engine_fixtures.errors import PerfError

Direction = Literal["higher", "lower", "none"]
DIRECTIONS: tuple[str, ...] = ("higher", "lower", "none")


class UnknownMetric(PerfError, KeyError):
    """A metric name that is neither in ``METRICS`` nor matches a role pattern."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class Metric:
    """One metric: how to read it and how to judge it."""

    name: str
    unit: str
    direction: Direction
    tolerance: float
    gates: bool
    description: str

    def __post_init__(self) -> None:
        if self.direction not in DIRECTIONS:
            raise ValueError(f"metric {self.name!r}: direction must be one of {DIRECTIONS}, "
                             f"got {self.direction!r}")
        if self.gates and (self.direction == "none" or not self.tolerance > 0):
            raise ValueError(f"gated metric {self.name!r} needs direction higher|lower and a tolerance > 0")

    def worse(self, delta: float) -> float:
        """Signed relative change ``delta`` re-expressed so that positive means worse."""
        return -delta if self.direction == "higher" else delta


def _m(name: str, unit: str, direction: Direction, tolerance: float, gates: bool, description: str) -> Metric:
    return Metric(name, unit, direction, tolerance, gates, description)


_ALL: tuple[Metric, ...] = (
    # Throughput (bigger is better).
    _m("requests_per_s", "req/s", "higher", 0.10, True, "completed requests per second in the window"),
    _m("output_tokens_per_s", "tok/s", "higher", 0.10, True, "generated tokens per second over the window"),
    _m("copy_per_s", "copies/s", "higher", 0.10, True, "SHM producer->consumer tensor copies per second"),
    _m("running_requests_max", "req", "higher", 0.10, True, "peak #running-req seen in the scheduler log"),
    # Latency (smaller is better).
    _m("latency_p50_ms", "ms", "lower", 0.10, True, "median per-item latency"),
    _m("latency_p99_ms", "ms", "lower", 0.20, True, "99th percentile per-item latency"),
    _m("ttft_p50_ms", "ms", "lower", 0.10, True, "median time to first token"),
    _m("ttft_p99_ms", "ms", "lower", 0.20, True, "99th percentile time to first token"),
    _m("tpot_p50_ms", "ms", "lower", 0.10, True, "median time per output token after the first"),
    _m("itl_p50_ms", "ms", "lower", 0.10, True, "median inter-token latency"),
    _m("e2e_p50_ms", "ms", "lower", 0.10, True, "median end-to-end request latency"),
    # Mechanism metrics of the transport arms.
    _m("ipc_opens_per_image", "opens/img", "lower", 0.05, True,
       "CUDA IPC handle opens per image (mechanism metric of the CUDA IPC arm; 1.0 means no handle cache)"),
    _m("rebuild_ms_per_image", "ms/img", "lower", 0.10, True, "time to rebuild a shared tensor per image"),
    # Report only.
    _m("producer_cpu_cores", "cores", "none", 0.0, False, "CPU cores used by the producer process tree"),
    _m("producer_share_of_quota", "ratio", "none", 0.0, False, "producer CPU / applied cgroup quota"),
    _m("throttled_periods", "periods", "none", 0.0, False, "cgroup nr_throttled delta over the window"),
    _m("throttled_ratio", "ratio", "none", 0.0, False, "nr_throttled / nr_periods over the window"),
    _m("gpu_util_mean", "%", "none", 0.0, False, "mean NVML GPU utilisation over the window"),
    _m("scheduling_delay_p99_ms", "ms", "none", 0.0, False, "p99 delay from request arrival to scheduling"),
    _m("achieved_concurrency", "req", "none", 0.0, False, "mean in-flight requests actually achieved"),
)

METRICS: Mapping[str, Metric] = MappingProxyType({m.name: m for m in _ALL})

PATTERNS: tuple[Metric, ...] = (
    _m("cpu_cores.<role>", "cores", "none", 0.0, False, "CPU cores used by the processes of one role"),
    _m("cpu_share_of_quota.<role>", "ratio", "none", 0.0, False, "one role's CPU / applied cgroup quota"),
    _m("threads.<role>", "threads", "none", 0.0, False, "thread count of one role's processes (max)"),
)

_ROLE = re.compile(r"[A-Za-z0-9_-]+")


def metric(name: str) -> Metric:
    """The registered metric ``name`` (role patterns resolved); ``UnknownMetric`` names the known ones."""
    found = METRICS.get(name)
    if found is not None:
        return found
    prefix, dot, role = name.partition(".")
    if dot and _ROLE.fullmatch(role):
        for template in PATTERNS:
            if template.name == f"{prefix}.<role>":
                return replace(template, name=name)
    known = ", ".join([*sorted(METRICS), *(p.name for p in PATTERNS)])
    raise UnknownMetric(
        f"Unknown metric {name!r}. Known metrics: {known}. "
        "Add it to engine_fixtures/judge/metrics.py (with unit, direction and tolerance) "
        "before recording it."
    )


def is_known(name: str) -> bool:
    try:
        metric(name)
    except UnknownMetric:
        return False
    return True

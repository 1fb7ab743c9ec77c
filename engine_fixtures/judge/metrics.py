"""The one metric registry: unit, direction, judged scale, declared floor, and whether a metric is judged.

Contract:
- ``direction`` is ``"higher"`` (bigger is better), ``"lower"`` (smaller is better) or ``"none"``. A judged
  metric always has a direction (TensorRT-LLM #18741 gated TPOT as "higher is better" and missed a 2.5x
  slowdown) and a ``floor`` > 0.
- ``scale``: ``"log"`` for positive, ratio-like quantities (a change is relative: ``floor=0.03`` is 3 %),
  ``"linear"`` where zero is a normal value (``ipc_opens_per_image``, shares of a quota): the floor is then
  in the metric's unit.
- ``floor`` is the declared smallest change ever flagged. The tolerance actually used comes from the noise
  measured in the pooled baseline (``judge.decide``); the floor only keeps a very quiet baseline from turning
  meaningless moves into verdicts.
- ``judged=False`` marks a diagnostic: shown next to its baseline, never a verdict (throttled periods,
  achieved concurrency, raw cores). ``condition`` names when a judged metric applies (``gpu_bound``: GPU
  utilisation is judged only on arms whose baseline shows the GPU as the bottleneck).
- Patterns: ``<name>.<role>`` for per-role CPU metrics, and ``rel.<name>``: a metric divided by the same
  metric of the scenario's control arm measured in the same rounds (it inherits direction, scale and floor).
- ``metric(name)`` raises ``UnknownMetric`` (a ``KeyError`` and a ``PerfError``) listing the known names.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Literal

from engine_fixtures.errors import PerfError
from engine_fixtures.judge.noise import LINEAR, LOG, Scale

Direction = Literal["higher", "lower", "none"]
DIRECTIONS: tuple[str, ...] = ("higher", "lower", "none")
REL_PREFIX = "rel."
GPU_BOUND = "gpu_bound"


class UnknownMetric(PerfError, KeyError):
    """A metric name that is neither in ``METRICS`` nor matches a pattern."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class Metric:
    """One metric: how to read it and how to judge it."""

    name: str
    unit: str
    direction: Direction
    scale: Scale
    floor: float
    judged: bool
    description: str
    condition: str | None = None

    def __post_init__(self) -> None:
        if self.direction not in DIRECTIONS:
            raise ValueError(f"metric {self.name!r}: direction must be one of {DIRECTIONS}, got {self.direction!r}")
        if self.judged and (self.direction == "none" or not self.floor > 0):
            raise ValueError(f"judged metric {self.name!r} needs direction higher|lower and a floor > 0")

    @property
    def sign(self) -> float:
        """+1 when a larger value is worse, -1 when it is better (effects are signed 'positive = worse')."""
        return 1.0 if self.direction == "lower" else -1.0

    @property
    def scale_floor(self) -> float:
        """The floor on the judged scale."""
        return self.scale.size(self.floor)


def _m(name: str, unit: str, direction: Direction, scale: Scale, floor: float, description: str,
       condition: str | None = None) -> Metric:
    return Metric(name, unit, direction, scale, floor, True, description, condition)


def _diag(name: str, unit: str, description: str) -> Metric:
    return Metric(name, unit, "none", LINEAR, 0.0, False, description)


_ALL: tuple[Metric, ...] = (
    # Throughput (bigger is better).
    _m("requests_per_s", "req/s", "higher", LOG, 0.03, "completed requests per second in the window"),
    _m("output_tokens_per_s", "tok/s", "higher", LOG, 0.03, "generated tokens per second over the window"),
    _m("copy_per_s", "copies/s", "higher", LOG, 0.03, "SHM tensor copies per second"),
    # Latency (smaller is better).
    _m("latency_p50_ms", "ms", "lower", LOG, 0.03, "median per-request latency"),
    _m("latency_p99_ms", "ms", "lower", LOG, 0.10, "99th percentile per-request latency"),
    _m("ttft_p50_ms", "ms", "lower", LOG, 0.03, "median time to first token"),
    _m("ttft_p99_ms", "ms", "lower", LOG, 0.10, "99th percentile time to first token"),
    _m("tpot_p50_ms", "ms", "lower", LOG, 0.03, "median time per output token after the first"),
    _m("itl_p50_ms", "ms", "lower", LOG, 0.03, "median inter-token latency"),
    _m("e2e_p50_ms", "ms", "lower", LOG, 0.03, "median end-to-end request latency"),
    # Mechanism metrics of the transport arms.
    _m("ipc_opens_per_image", "opens/img", "lower", LINEAR, 0.05,
       "CUDA IPC handle opens per image (1.0 means no pool-handle cache)"),
    _m("rebuild_ms_per_image", "ms/img", "lower", LOG, 0.05, "scheduler time to rebuild a shared feature per image"),
    # Utilisation: judged where the GPU is the bottleneck (a CPU-side regression then leaves it idle).
    _m("gpu_util_mean", "%", "higher", LINEAR, 2.0, "mean NVML GPU utilisation over the window", GPU_BOUND),
    _m("running_requests_max", "req", "higher", LINEAR, 1.0, "peak running requests the scheduler reported"),
    # Diagnostics: shown next to the baseline, never judged.
    _diag("producer_cpu_cores", "cores", "CPU cores used by the mechanism producer's process tree"),
    _diag("producer_share_of_quota", "ratio", "producer CPU / applied cgroup quota"),
    _diag("throttled_periods", "periods", "cgroup nr_throttled delta over the window"),
    _diag("throttled_ratio", "ratio", "nr_throttled / nr_periods over the window"),
    _diag("scheduling_delay_p99_ms", "ms", "p99 delay from a request's due time to its send"),
    _diag("achieved_concurrency", "req", "mean in-flight requests actually achieved"),
    _diag("client_loop_lag_p99_ms", "ms", "p99 lateness of the load client's event-loop probe over its segment"),
    _diag("running_requests_mean", "req", "mean running requests the scheduler reported while loaded"),
)

METRICS: Mapping[str, Metric] = MappingProxyType({m.name: m for m in _ALL})

PATTERNS: tuple[Metric, ...] = (
    _m("cpu_s_per_request.<role>", "cpu-s/req", "lower", LOG, 0.05,
       "CPU seconds one role's processes spent per completed request"),
    _m("cpu_share_of_quota.<role>", "of quota", "lower", LINEAR, 0.02,
       "one role's CPU as a share of the applied cgroup quota"),
    _diag("cpu_cores.<role>", "cores", "CPU cores used by the processes of one role"),
    _diag("threads.<role>", "threads", "thread count of one role's processes (max)"),
)

_ROLE = re.compile(r"[A-Za-z0-9_-]+")


def metric(name: str) -> Metric:
    """The registered metric ``name`` (patterns resolved); ``UnknownMetric`` names the known ones."""
    found = METRICS.get(name)
    if found is not None:
        return found
    if name.startswith(REL_PREFIX):
        base = metric(name[len(REL_PREFIX):])
        if base.judged and base.scale.name == "log":
            return replace(base, name=name, unit="x control",
                           description=f"{base.name} / the control arm's {base.name}, measured in the same rounds")
    prefix, dot, role = name.partition(".")
    if dot and _ROLE.fullmatch(role):
        for template in PATTERNS:
            if template.name == f"{prefix}.<role>":
                return replace(template, name=name)
    known = ", ".join([*sorted(METRICS), *(p.name for p in PATTERNS), "rel.<judged log-scale metric>"])
    raise UnknownMetric(
        f"Unknown metric {name!r}. Known metrics: {known}. Add it to engine_fixtures/judge/metrics.py "
        "(with unit, direction, scale and floor) before recording it."
    )


def is_known(name: str) -> bool:
    try:
        metric(name)
    except UnknownMetric:
        return False
    return True

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
  achieved concurrency, raw cores). ``condition`` names when a judged metric gates: ``same_build`` gates only
  between arms of one build (a live contrast's blocks, or a live arm's ``rel.`` ratio to its control in the same
  blocks), never as a level against a pool or in an A/B of builds (``judge.gating.applies``).
- ``gates``: whether a judged metric gates a scenario (``judge.gating``: req/s, TTFT p50, TPOT (the geometric mean
  of per-request TPOT; its p50 is judged as a diagnostic), GPU busy from NVML's sample buffer, the CPU seconds per
  request and the share of the quota of the role the arm changes, the mechanism counters, and on the CPU tier the
  copy path's rates); the others are judged only as the scenario's diagnostics (report-only rows), so a clean run
  is not failed by ~85 correlated cells each at its own alpha (output tok/s repeats req/s; the p99s are too noisy).
- CPU: a role's cost is ``cpu_s_per_request.<role>`` (what one request costs it, whatever the other roles got);
  ``cpu_share_of_quota.<role>`` is the figure the seed published (the tokenizer manager's 1089 % against 44 % of a
  core) and gates beside it, for the role the arm changes only: under a binding quota the shares are zero-sum, so
  the neighbours' shares (a starved role reads as an improvement) are report-only. Both are log scale: the seed's
  figures are ratios (3-5x on regression 1), and a contrast's bound is a ratio.
- GPU busy: ``gpu_util_buffer_mean`` (NVML's own sample buffer, each driver period once with its timestamp,
  ``sampling.gpu_buffer``) gates, "higher" is better: at the same load a CPU-side regression starves the GPU (the
  seed: 26 % against 76 %). Log scale, so a contrast's bound reads as for req/s. It is ``same_build``: a build
  whose kernels got faster idles the GPU at the same load, so a level against a pool (or an A/B of builds) is not
  a starvation signal; req/s and TPOT judge the build. ``gpu_util_mean`` (a 10 Hz poll of NVML's last-period
  average) is judged and shown beside it, never gating.
- ``ab_detect``: the change the paired A/B promises to catch (10 % for throughput, TTFT and TPOT; the other
  values are declared starting points, not yet measured); ``--perf-ab-detect`` overrides it on log-scale metrics.
- ``max_detect``: the widest promise a pooled baseline may make and still gate this metric; a pool that
  promises more is too wide (``inconclusive``, naming how many runs would do). Declared so that a pool which
  cannot see a 1.5x change in throughput or a p50 latency (2x for a p99, 1.6x for CPU per request) does not
  gate; the sharp promise is the A/B's (10 %). The committed H200 tiny pool's TPOT p50 (+70 %) is too wide.
- ``--perf-floor PCT`` overrides the floor of log-scale metrics only: on a linear metric a percent has no unit,
  so its declared floor stays.
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
SAME_BUILD = "same_build"


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
    gates: bool = True
    ab_detect: float | None = None  # declared A/B promise (relative on log scale, in ``unit`` on linear)
    max_detect: float | None = None  # widest pooled promise that still gates (same units)

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

    def floor_size(self, override: float | None) -> float:
        """The floor on the judged scale with ``--perf-floor``/``perf(floor=)`` (a fraction) applied: it replaces
        the floor of log-scale metrics; a linear metric keeps its declared floor (a percent has no unit there)."""
        if override is None or self.scale.name != "log":
            return self.scale_floor
        return self.scale.size(override)

    def ab_size(self, override: float | None = None) -> float:
        """The A/B promise on the judged scale (``--perf-ab-detect`` applies to log-scale metrics only)."""
        if override is not None and self.scale.name == "log":
            return self.scale.size(override)
        return self.scale.size(self.ab_detect if self.ab_detect is not None else 0.10)

    @property
    def max_size(self) -> float | None:
        return None if self.max_detect is None else self.scale.size(self.max_detect)


def _m(name: str, unit: str, direction: Direction, scale: Scale, floor: float, description: str,
       condition: str | None = None, *, gates: bool = True, ab: float, most: float) -> Metric:
    return Metric(name, unit, direction, scale, floor, True, description, condition, gates, ab, most)


def _diag(name: str, unit: str, description: str) -> Metric:
    return Metric(name, unit, "none", LINEAR, 0.0, False, description, None, False)


_ALL: tuple[Metric, ...] = (
    # Throughput (bigger is better). ``ab``: the A/B promise; ``most``: the widest pooled promise that gates.
    _m("requests_per_s", "req/s", "higher", LOG, 0.03, "requests per second in the window, by each request's "
       "share of its lifetime inside it", ab=0.10, most=0.50),
    _m("output_tokens_per_s", "tok/s", "higher", LOG, 0.03, "generated tokens per second over the window",
       gates=False, ab=0.10, most=0.50),  # the same windows' req/s times a fixed output length: counted once
    _m("copy_per_s", "copies/s", "higher", LOG, 0.03, "SHM tensor copies per second", ab=0.10, most=0.50),
    # Latency (smaller is better).
    _m("latency_p50_ms", "ms", "lower", LOG, 0.03, "median per-request latency", ab=0.10, most=0.50),
    _m("latency_p99_ms", "ms", "lower", LOG, 0.10, "99th percentile per-request latency", gates=False,
       ab=0.20, most=1.00),
    _m("ttft_p50_ms", "ms", "lower", LOG, 0.03, "median time to first token", ab=0.10, most=0.50),
    _m("ttft_p99_ms", "ms", "lower", LOG, 0.10, "99th percentile time to first token", gates=False,
       ab=0.20, most=1.00),
    # TPOT: gated on the geometric mean of per-request TPOT, the window statistic with the smallest per-block spread
    # (docs/results/estimators-2026-12-03); its median is the figure users read, judged and shown, never gating.
    _m("tpot_gmean_ms", "ms", "lower", LOG, 0.03, "geometric mean of per-request time per output token after the "
       "first, over the requests that finished in the window (what TPOT gates on)", ab=0.10, most=0.50),
    _m("tpot_p50_ms", "ms", "lower", LOG, 0.03, "median time per output token after the first (shown; TPOT gates on "
       "tpot_gmean_ms, 3-5x quieter per block)", gates=False, ab=0.10, most=0.50),
    _m("itl_p50_ms", "ms", "lower", LOG, 0.03, "median inter-token latency", gates=False, ab=0.10, most=0.50),
    _m("e2e_p50_ms", "ms", "lower", LOG, 0.03, "median end-to-end request latency", gates=False, ab=0.10, most=0.50),
    # Mechanism metrics of the transport arms.
    _m("ipc_opens_per_image", "opens/img", "lower", LINEAR, 0.05,
       "CUDA IPC handle opens per image (1.0 means no pool-handle cache), from the proof counters; one value per "
       "segment, on its first window", ab=0.10, most=0.50),
    _m("rebuild_ms_per_image", "ms/img", "lower", LOG, 0.05, "scheduler time to rebuild a shared feature per image, "
       "from the proof counters; one value per segment, on its first window", ab=0.15, most=0.50),
    # GPU busy (higher is better at the same load): NVML's sample buffer gates between arms of one build; the poll is
    # shown beside it. 15 %: the ceiling a live contrast may promise (its per-block sd was 7.8 % rms on two H100 hosts,
    # 1.5-2x req/s's; the poll's 10.7 %, and 9-16 % on the H200s of 2026-12-03: docs/results/h100-issue46-2026-12-06b).
    _m("gpu_util_buffer_mean", "%", "higher", LOG, 0.03, "mean of NVML's own GPU utilisation samples whose driver "
       "period ended in the window (nvmlDeviceGetSamples: each period once, not a poll of the last 1 s average)",
       SAME_BUILD, ab=0.15, most=0.50),
    _m("gpu_util_mean", "%", "higher", LINEAR, 2.0, "mean of NVML's GPU utilisation polled at 10 Hz over the window "
       "(nvmlDeviceGetUtilizationRates: the last driver period's average, read as often as it is polled); shown "
       "beside gpu_util_buffer_mean, which gates", gates=False, ab=5.0, most=10.0),
    _m("running_requests_max", "req", "higher", LINEAR, 1.0, "the largest decode batch (running requests; with "
       "PP one micro-batch) any one scheduler process ran over the segment, from the scheduler's own count of every "
       "batch (the SGLang plugin on Scheduler.run_batch); one value per segment, on its first window",
       gates=False, ab=1.5, most=4.0),
    # Diagnostics: shown next to the baseline, never judged.
    _diag("producer_cpu_cores", "cores", "CPU cores used by the mechanism producer's process tree"),
    _diag("producer_share_of_quota", "ratio", "producer CPU / applied cgroup quota"),
    _diag("throttled_periods", "periods", "cgroup nr_throttled delta over the window"),
    _diag("throttled_ratio", "ratio", "nr_throttled / nr_periods over the window"),
    _diag("scheduling_delay_p99_ms", "ms", "p99 delay from a request's due time to its send"),
    _diag("achieved_concurrency", "req", "mean in-flight requests actually achieved"),
    _diag("requests_completed", "req", "requests that finished in the window: what its latency statistics rest on"),
    _diag("requests_per_s_counted", "req/s", "completed requests in the window over its length (whole lockstep "
          "bursts: quantized)"),
    _diag("client_loop_lag_p99_ms", "ms", "p99 lateness of the load client's event-loop probe over its segment; "
          "one value per segment, on its first window"),
    _diag("running_requests_mean", "req", "mean decode batch size (running requests per decode step) the schedulers "
          "ran over the segment, from their own count of every batch (the SGLang plugin on Scheduler.run_batch); one "
          "value per segment, on its first window"),
    # GPU telemetry (NVML, mean over the window and the arm's GPUs): report-only, the suite never locks clocks or
    # changes any GPU setting. A window the GPU was slowed in is refused (scenarios.refusal.MAX_THROTTLED_FRACTION).
    _diag("gpu_util_buffer_periods", "periods", "how many of NVML's utilisation periods the window holds"),
    _diag("gpu_sm_clock_mhz_mean", "MHz", "mean GPU SM clock over the window"),
    _diag("gpu_sm_clock_max_mhz", "MHz", "the GPU's maximum SM clock (NVML): what the window's SM clock lost to a "
          "power cap or heat is measured against"),
    _diag("gpu_mem_clock_mhz_mean", "MHz", "mean GPU memory clock over the window"),
    _diag("gpu_power_w_mean", "W", "mean GPU power draw over the window"),
    _diag("gpu_temp_c_mean", "C", "mean GPU temperature (the GPU sensor) over the window"),
    _diag("gpu_temp_c_max", "C", "the hottest GPU temperature reading in the window"),
    _diag("gpu_throttled_fraction", "ratio", "share of the window's readings in which any GPU was slowed by heat or "
          "power (NVML's clock-event reasons: the five gpu_throttle_* below); a window above "
          "scenarios.refusal.MAX_THROTTLED_FRACTION counts toward no verdict where the hardware slowed it or its SM "
          "clock lost more than scenarios.refusal.MAX_CLOCK_LOSS"),
    _diag("gpu_throttle_hw_slowdown", "ratio", "share of the window's readings with NVML's HW slowdown (clocks halved "
          "or worse: heat, power brake or a power supply alarm)"),
    _diag("gpu_throttle_hw_thermal_slowdown", "ratio", "share of the window's readings with NVML's HW thermal "
          "slowdown"),
    _diag("gpu_throttle_hw_power_brake_slowdown", "ratio", "share of the window's readings with NVML's HW power brake "
          "slowdown (asserted by the system's power supply)"),
    _diag("gpu_throttle_sw_thermal_slowdown", "ratio", "share of the window's readings with NVML's SW thermal "
          "slowdown (the driver holding the GPU under its temperature limit)"),
    _diag("gpu_throttle_sw_power_cap", "ratio", "share of the window's readings with NVML's SW power cap (the driver "
          "holding the board under its power limit)"),
    # The host's CPU state (sampling.host), report-only: a window the hypervisor stole from is refused
    # (scenarios.refusal.MAX_STEAL_FRACTION).
    _diag("host_steal_fraction", "ratio", "share of the host CPUs' time in the window that the hypervisor gave to "
          "something else (steal, /proc/stat); a window above scenarios.refusal.MAX_STEAL_FRACTION counts toward no "
          "verdict"),
    _diag("host_probe_cpu_ms", "ms", "median CPU time of a fixed unit of pure-Python work run every 0.5 s in the "
          "test process: the speed of the host's vCPU (its clock, a busy sibling thread)"),
    _diag("host_probe_wall_ms", "ms", "median wall time of the same probes: adds what preemption and steal took"),
)

METRICS: Mapping[str, Metric] = MappingProxyType({m.name: m for m in _ALL})

PATTERNS: tuple[Metric, ...] = (
    _m("cpu_s_per_request.<role>", "cpu-s/req", "lower", LOG, 0.05,
       "CPU seconds one role's processes spent per completed request", ab=0.15, most=0.60),
    _m("cpu_share_of_quota.<role>", "of quota", "lower", LOG, 0.05,
       "one role's CPU as a share of the applied cgroup quota (gates for the role the arm changes; the neighbours' "
       "shares are zero-sum under a binding quota)", ab=0.15, most=0.60),
    _diag("cpu_cores.<role>", "cores", "CPU cores used by the processes of one role"),
    _diag("gpu_sm_util.<role>", "%", "one role's processes' SM utilisation from NVML's per-process samples (each "
          "process's mean over its periods in the window, summed)"),
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

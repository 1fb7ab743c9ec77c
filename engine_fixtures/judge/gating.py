"""Which judged metrics gate a scenario, and which are its diagnostics (issue 19, item 7).

A scenario gates on few metrics, so that a whole clean run stays green 19 times in 20 (``decide.gate_alpha``
splits ``FAMILY_ALPHA`` over them): the registry's ``gates`` metrics (req/s, TTFT p50, TPOT as the geometric mean of
per-request TPOT (``tpot_gmean_ms``), the mechanism
counters; on the CPU tier the copy path's rates and latency), plus ``cpu_s_per_request.<role>`` of the roles
the arm changes. Every other judged metric is still judged, as a report-only diagnostic row.

The roles an arm changes, by the axis that names the arm (SGLang's processes, by process title):
- ``copy`` (the SHM copy of a multimodal feature): the tokenizer manager copies, in the HTTP server process
  (``http_server``); the scheduler only maps the result;
- ``ipc_cache`` (CUDA IPC pool-handle cache): the scheduler opens the handles (``scheduler``);
- ``transport`` without one of those: both ends (``http_server``, ``scheduler``).
A scenario whose arm names none of these gates on no per-role CPU metric. Where a metric's ``rel.`` ratio to the
control arm is measured (the CPU tier), the ratio gates and the absolute value is a diagnostic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from engine_fixtures.judge.metrics import GPU_BOUND, REL_PREFIX, metric

GPU_BOUND_UTIL = 60.0  # % mean utilisation in the baseline above which the GPU is the arm's bottleneck

ROLES_BY_AXIS: Mapping[str, tuple[str, ...]] = {
    "copy": ("http_server",),
    "ipc_cache": ("scheduler",),
    "transport": ("http_server", "scheduler"),
}
PER_ROLE_GATE = "cpu_s_per_request"


def arm_of(scenario: str) -> dict[str, str]:
    """The ``key=value`` axes of a scenario id such as ``engine/transport=cpu/copy=buffer/c=16``."""
    out: dict[str, str] = {}
    for part in scenario.split("/"):
        key, eq, value = part.partition("=")
        if eq:
            out[key] = value
    return out


def changed_roles(arm: Mapping[str, str]) -> tuple[str, ...]:
    for axis in ("copy", "ipc_cache", "transport"):
        if axis in arm:
            return ROLES_BY_AXIS[axis]
    return ()


def gates(name: str, arm: Mapping[str, str]) -> bool:
    """Whether ``name`` gates a scenario with these axes (False for diagnostics and non-gating judged metrics)."""
    m = metric(name)
    if not m.judged or not m.gates:
        return False
    prefix, dot, role = name.partition(".")
    if dot and prefix == PER_ROLE_GATE:
        return role in changed_roles(arm)
    return True


def gating(names: Iterable[str], arm: Mapping[str, str],
           runs_for: Callable[[str], Sequence[Sequence[float]]] | None = None) -> tuple[str, ...]:
    """The gating metrics among ``names``, sorted; with the pool's ``runs_for``, a conditional metric counts
    only where its condition holds (``gpu_util_mean`` on a GPU-bound arm). Where ``rel.<m>`` is measured it gates
    instead of ``<m>``: the ratio to the control arm of the same rounds is what travels between runs and hosts
    (README: a ~15 % slowdown was caught by rel.requests_per_s each time, never by the absolute rate)."""
    out = {n for n in set(names) if gates(n, arm) and applies(n, runs_for)}
    return tuple(sorted(out - {n[len(REL_PREFIX):] for n in out if n.startswith(REL_PREFIX)}))


def gpu_bound(runs: Sequence[Sequence[float]]) -> bool:
    """A pool of ``gpu_util_mean`` that shows the GPU as the arm's bottleneck."""
    flat = [v for r in runs for v in r]
    return bool(flat) and sum(flat) / len(flat) >= GPU_BOUND_UTIL


def applies(name: str, runs_for: Callable[[str], Sequence[Sequence[float]]] | None) -> bool:
    m = metric(name)
    if m.condition != GPU_BOUND:
        return True
    return runs_for is not None and gpu_bound(runs_for(name))

"""Which judged metrics gate a scenario, and which are its diagnostics (issue 19, item 7).

A scenario gates on few metrics, so that a whole clean run stays green 19 times in 20 (``decide.gate_alpha``
splits ``FAMILY_ALPHA`` over them): the registry's ``gates`` metrics (req/s, TTFT p50, TPOT as the geometric mean of
per-request TPOT (``tpot_gmean_ms``), GPU busy from NVML's sample buffer where its ``same_build`` condition holds,
the mechanism counters; on the CPU tier the copy path's rates and latency), plus ``cpu_s_per_request.<role>`` and
``cpu_share_of_quota.<role>`` of the roles the arm changes. Every other judged metric is still judged, as a
report-only diagnostic row.

The roles an arm changes, by the axis that names the arm (SGLang's processes, by process title):
- ``copy`` (the SHM copy of a multimodal feature): the tokenizer manager copies, in the HTTP server process
  (``http_server``); the scheduler only maps the result;
- ``ipc_cache`` (CUDA IPC pool-handle cache): the scheduler opens the handles (``scheduler``);
- ``transport`` without one of those: both ends (``http_server``, ``scheduler``).
A scenario whose arm names none of these gates on no per-role CPU metric. Where a metric's ``rel.`` ratio to the
control arm is measured (the CPU tier), the ratio gates and the absolute value is a diagnostic.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from engine_fixtures.judge.families import PER_ROLE_GATES, ROLES_BY_AXIS
from engine_fixtures.judge.metrics import REL_PREFIX, SAME_BUILD, metric


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
    if dot and prefix in PER_ROLE_GATES:
        return role in changed_roles(arm)
    return True


def gating(names: Iterable[str], arm: Mapping[str, str]) -> tuple[str, ...]:
    """The gating metrics among ``names``, sorted; a conditional metric counts only where its condition holds
    (``applies``: GPU busy as a live arm's ``rel.`` ratio, never as a level). Where ``rel.<m>`` is measured it gates
    instead of ``<m>``: the ratio to the control arm of the same rounds is what travels between runs and hosts
    (README: a ~15 % slowdown was caught by rel.requests_per_s each time, never by the absolute rate)."""
    out = {n for n in set(names) if gates(n, arm) and applies(n)}
    return tuple(sorted(out - {n[len(REL_PREFIX):] for n in out if n.startswith(REL_PREFIX)}))


def applies(name: str) -> bool:
    """Whether a judged metric's condition holds for ``name``: ``same_build`` (GPU busy) gates as a ``rel.`` ratio
    to the control of the same blocks, not as a level against a pool or between builds (a faster kernel idles the
    GPU at the same load)."""
    m = metric(name)
    if m.condition == SAME_BUILD:
        return name.startswith(REL_PREFIX)
    return True

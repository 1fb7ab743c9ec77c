"""The metric families' policy, one home for every tier: which families a contrast gates on and which it only
reports (and why), the per-role families and the roles each axis changes, and the ``rel.*`` set each tier measures
against its control. The metrics themselves (unit, direction, scale, floor, condition) are ``judge.metrics``; which of
a scenario's metrics gate is ``judge.gating``, which reads the axis roles from here.
"""

from __future__ import annotations

from collections.abc import Mapping

ROLE_FAMILY = "cpu_s_per_request.<role>"
SHARE_FAMILY = "cpu_share_of_quota.<role>"
ROLE_FAMILIES = (ROLE_FAMILY, SHARE_FAMILY)  # resolved to the roles a contrast's two arms differ in (``families``)
# The families a contrast gates on, each by its window statistic with the smallest per-block spread (TPOT: the
# geometric mean of per-request TPOT; TTFT: the median, which stayed the quietest once the warm-up ends with its
# in-flight wave; docs/results/estimators-2026-12-03; GPU busy: NVML's sample buffer, issue 46), and the figures
# users read, shown beside them, never gating. A role's share of the quota is judged only where a quota applies
# (the arms measure it there): it is the figure the seed published, with the CPU per request beside it.
FAMILIES: tuple[str, ...] = ("requests_per_s", "ttft_p50_ms", "tpot_gmean_ms", ROLE_FAMILY, SHARE_FAMILY,
                              "gpu_util_buffer_mean", "gpu_util_mean", "tpot_p50_ms")
# Measured and shown with their interval in every contrast, never gating, and why (a contrast adds its own).
REPORTED_WHY: Mapping[str, str] = {
    "tpot_p50_ms": "the TPOT figure users read; TPOT gates on its geometric mean over the requests, 3-5x quieter per "
                   "block (TPOT is bimodal per lockstep wave)",
    "gpu_util_mean": "a 10 Hz poll of NVML's last-period average, shown beside the sample buffer's mean "
                     "(gpu_util_buffer_mean), which gates: the buffer reads each driver period once, cut at the "
                     "window's edges by the driver's timestamp; on the same windows of two H100 hosts the poll was "
                     "noisier per block (10.7 against 7.8 % rms, docs/results/h100-issue46-2026-12-06b)",
}
REPORTED: tuple[str, ...] = tuple(REPORTED_WHY)
# A live arm's ratios over its group's control, gated against its pool instead of its level (GPU busy gates only so).
LIVE_REL_METRICS = ("requests_per_s", "ttft_p50_ms", "tpot_gmean_ms", "gpu_util_buffer_mean")
# The CPU tier's arms' ratios over its control arm of the same rounds (``cpu_tier.driver``).
CPU_REL_METRICS = ("requests_per_s", "latency_p50_ms")
# The roles whose CPU an axis changes (SGLang's processes by title): the copy and its threads run in the tokenizer
# manager (the HTTP server process), the IPC cache opens handles in the scheduler, a transport both ends.
ROLES_BY_AXIS: Mapping[str, tuple[str, ...]] = {
    "copy": ("http_server",),
    "ipc_cache": ("scheduler",),
    "transport": ("http_server", "scheduler"),
}
PER_ROLE_GATES = ("cpu_s_per_request", "cpu_share_of_quota")  # gate for the roles the arm changes only

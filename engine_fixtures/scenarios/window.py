"""One load window against a running engine, turned into metric values.

``measure_window(engine, workload, gpus, hz, client_cpus)`` runs the workload from a client process outside the
engine's cgroup while sampling CPU per role (psutil), GPU utilisation (NVML) and the scheduler's running
requests (``/metrics``), and reads the arm proof before and after. Values:

- throughput and latency from the client: ``requests_per_s``, ``output_tokens_per_s``, ``ttft_p50_ms``,
  ``ttft_p99_ms``, ``tpot_p50_ms``;
- CPU per role: ``cpu_s_per_request.<role>`` (CPU seconds over the window's completed requests, warmup
  included in both: it survives a change of load better than cores), ``cpu_share_of_quota.<role>`` under a
  quota, and ``cpu_cores.<role>`` as a diagnostic;
- ``gpu_util_mean``; ``running_requests_max`` (judged) and ``running_requests_mean``;
- the CUDA IPC arm's ``ipc_opens_per_image`` and ``rebuild_ms_per_image``, from the proof counters;
- diagnostics ``achieved_concurrency`` and ``scheduling_delay_p99_ms``.
A client-bound window (the client, not the engine, limited it) is measured again, up to ``attempts`` times,
and is then a ``MeasurementError``: it is never recorded as an engine number. An engine that dies under the
load is ``ProcessCrashed`` (its exit status and log tail), whatever the client saw.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine_fixtures.engine.handle import EngineHandle
from engine_fixtures.errors import MeasurementError, ProcessCrashed
from engine_fixtures.loadgen.load_report import LoadReport
from engine_fixtures.loadgen.runner import run_load
from engine_fixtures.loadgen.workload import WorkloadSpec
from engine_fixtures.sampling.base import SamplerSet
from engine_fixtures.sampling.cpu import CpuSampler
from engine_fixtures.sampling.gpu import GpuSampler
from engine_fixtures.sampling.running import RunningRequestsSampler

CLIENT_BOUND_ATTEMPTS = 3
# Roles whose CPU is judged: SGLang's own serving processes. Helpers (multiprocessing's resource tracker,
# "other") are shown as cores only.
JUDGED_ROLES = ("http_server", "scheduler", "detokenizer", "detokenizer_router", "tokenizer_worker")


def _load(engine: EngineHandle, workload: WorkloadSpec, client_cpus: Sequence[int] | None,
          attempts: int, proof: bool) -> tuple[LoadReport, dict[str, float]]:
    """The first window that was not client-bound, with its sampler summaries."""
    reasons = []
    proof = proof and engine.spec.proof
    for _ in range(attempts):
        before = engine.proof().summary() if proof else {}
        cpu = CpuSampler(engine.pids, 0.1, engine.spec.cpu_quota)
        samplers = [cpu, GpuSampler(engine.spec.gpus, engine.pids, 0.1), RunningRequestsSampler(engine.url)]
        try:
            with SamplerSet(samplers) as ss:
                report = run_load(engine.url, workload, cpus=client_cpus)
        except Exception as exc:
            _engine_died_under(engine, exc)
            raise
        engine.ensure_alive()
        if not report.client_bound:
            after = engine.proof().summary() if proof else {}
            summary = dict(ss.summary())
            summary["_wall_s"] = cpu.wall_s
            for key, value in after.items():
                summary[f"_proof.{key}"] = value - before.get(key, 0.0)
            return report, summary
        reasons.append(report.client_bound_reason)
    raise MeasurementError(f"the load client, not the engine, limited {attempts} windows in a row against "
                           f"{engine.url} ({'; '.join(reasons)}); such windows are never recorded: pin the client "
                           "to free CPUs (--perf-client-cpus), or lower the concurrency")


def _engine_died_under(engine: EngineHandle, exc: Exception) -> None:
    """An engine that died under the load is the error that names the fault, not the client's failed requests."""
    try:
        engine.ensure_alive()
    except ProcessCrashed as crashed:
        raise crashed from exc


def measure_window(engine: EngineHandle, workload: WorkloadSpec, client_cpus: Sequence[int] | None = None,
                   attempts: int = CLIENT_BOUND_ATTEMPTS, proof: bool = True) -> dict[str, float]:
    """One window's metrics; ``proof=False`` skips the per-window proof counters (the IPC metrics), which cost
    two proof flushes per window."""
    report, s = _load(engine, workload, client_cpus, attempts, proof)
    values = {"requests_per_s": report.requests_per_s, "output_tokens_per_s": report.output_tokens_per_s,
              "ttft_p50_ms": report.ttft.p50, "ttft_p99_ms": report.ttft.p99,
              "achieved_concurrency": report.achieved_concurrency,
              "scheduling_delay_p99_ms": report.scheduling_delay.p99}
    if report.tpot is not None:
        values["tpot_p50_ms"] = report.tpot.p50
    requests = workload.total_requests
    for key, value in s.items():
        parts = key.split(".")
        if parts[0] == "cpu" and parts[-1] == "cores":
            values[f"cpu_cores.{parts[1]}"] = value
            if value > 0 and parts[1] in JUDGED_ROLES:  # an idle role has no CPU per request (and zero no log)
                values[f"cpu_s_per_request.{parts[1]}"] = value * s["_wall_s"] / requests
        elif parts[0] == "cpu" and parts[-1] == "share_of_quota" and parts[1] in JUDGED_ROLES:
            values[f"cpu_share_of_quota.{parts[1]}"] = value
    if "gpu.util.mean" in s:
        values["gpu_util_mean"] = s["gpu.util.mean"]
    if "running.max" in s:
        values["running_requests_max"] = s["running.max"]
        values["running_requests_mean"] = s["running.mean"]
    rebuilds = s.get("_proof.ipc_rebuilds", 0.0)
    if rebuilds > 0:
        values["ipc_opens_per_image"] = s.get("_proof.ipc_opens", 0.0) / rebuilds
        values["rebuild_ms_per_image"] = 1000 * s.get("_proof.ipc_rebuild_s", 0.0) / rebuilds
    return values

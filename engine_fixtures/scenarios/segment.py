"""One load segment against a running engine, cut into back-to-back measurement windows.

``measure_segment(engine, stream, plan)`` runs a warm-up of closed-loop load (never measured: ``plan.warmup_s``, and
then until every request sent in it has completed, as the client decides and reports it in ``Segment.measure_at``),
then ``plan.windows`` windows of ``plan.window_s`` seconds from ``measure_at`` with no pause between them, then the
drain. The samplers (CPU per role, GPU utilisation, the cgroup's counters) run over the whole segment and are cut at
the window marks.
Values per window (``window_values``):

- ``requests_per_s``: the time-weighted progress rate (each request adds the share of its lifetime inside the
  window; ``loadgen.stream.progress_rate`` says why: completions come in lockstep bursts, so a count per window is
  quantized); ``requests_per_s_counted`` (completions in the window over its length) as a diagnostic;
  ``output_tokens_per_s`` (tokens by their own timestamps inside the window, ``loadgen.stream.tokens_in``);
- ``ttft_p50_ms``, ``ttft_p99_ms``, ``tpot_p50_ms`` and ``tpot_gmean_ms`` (the geometric mean of per-request TPOT,
  what the judge gates TPOT on: ``loadgen.latency.Percentiles``) of the requests that finished in the window, and
  their count ``requests_completed`` (a row resting on few requests says so);
- ``cpu_s_per_request.<role>`` (the role's CPU seconds in the window over the requests' progress in it, the
  continuous count above), ``cpu_share_of_quota.<role>`` under a quota, ``cpu_cores.<role>`` as a diagnostic;
- ``gpu_util_mean``; the diagnostic ``achieved_concurrency`` (time-weighted requests in flight); under a cgroup
  sandbox the diagnostic ``throttled_ratio`` (the share of the quota's CFS periods in which the engine's tree was
  throttled, ``sampling.cgroup``);
- the GPU's telemetry, report-only (``sampling.gpu``, each ``gpu.x.y`` of its cut as ``gpu_x_y``): SM and memory
  clocks, power, temperature (``gpu_temp_c_mean``, ``gpu_temp_c_max``), and the share of the window's readings in
  which NVML said the GPU was slowed by heat or power, per reason (``gpu_throttle_sw_power_cap`` and the four others
  of ``sampling.clock_events``) and for any of them (``gpu_throttled_fraction``). A field NVML does not report has no
  value (``notes=`` gets the reason once per segment).

- the host's CPU state, report-only (``sampling.host``): ``host_steal_fraction`` (the hypervisor's steal time over
  the CPUs' time), ``host_probe_cpu_ms`` and ``host_probe_wall_ms`` (a fixed CPU probe's median CPU and wall time).

**A window is refused** where the GPU was slowed by heat or power or the host's hypervisor stole its CPUs
(``scenarios.refusal.window_refusal``, which says the rules): it keeps only its GPU and host telemetry (what it was
refused for), so none of its judged values counts toward a verdict, a figure or a pool; its timeline span says why,
and the runner counts and names it among the run's findings. The other windows
of the visit stay. Where that leaves a block without a window of an arm, the existing rule for a short block
applies: the block gives its contrasts no effect (``judge.blocks.labelled_effects``), an instance group with no
usable block none either (``unit_means``), a contrast left with too few effects is ``inconclusive``
(``judge.decide.MIN_BLOCKS``), and the stopping rule measures more blocks while a cell is open, up to the budget; a
figure point left with no window is a ``MeasurementError``; an arm judged against its pool is judged on the windows
left (one left with none says its row lost the metric). The segment's judged per-segment values (below) span the
refused window too, so a segment with a refused window gives none of them.

Values per segment (``segment_values``), read once around it and put on its FIRST window only, never copied into the
others: the visit (one segment) is their unit, so a copy per window would count one reading as several:

- ``running_requests_max`` and ``running_requests_mean``: the scheduler's own count of every decode batch it ran
  (``engine.running``, from the proofs taken before and after the segment: warmup and drain included, the largest
  batch of any one scheduler process and the mean batch size);
- the CUDA IPC arm's ``ipc_opens_per_image`` and ``rebuild_ms_per_image`` from the proof counters;
- the diagnostic ``client_loop_lag_p99_ms`` (the client's event-loop lag over the segment).

A consumer reads a per-segment metric from the windows that have it (``scenarios.results.arm_result`` records
which, ``RunResult.windows_of``).

``window_requests(seg, t0, t1)`` keeps the requests behind a window (every one whose lifetime overlaps it, as
``REQUEST_COLUMNS`` rows relative to the segment's first send, with the window marks), so that any estimator can
be recomputed from a results file; ``stored_window`` reads one back.

A window with no completed request is a ``MeasurementError``, never a 0 ms latency; so is a segment whose proofs
show no scheduler batch at all (the probe did not count, ``engine.running.probe_states`` says why). A segment the
client limited (concurrency not reached, or its event loop lagging) is measured again, up to
``CLIENT_BOUND_ATTEMPTS`` times, then a ``MeasurementError``. An engine that dies under the load is
``ProcessCrashed``, whatever the client saw.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine_fixtures.engine.handle import EngineHandle
from engine_fixtures.engine.proof import ArmProof
from engine_fixtures.engine.running import probe_states, running_requests
from engine_fixtures.errors import MeasurementError, ProcessCrashed
from engine_fixtures.judge.metrics import metric
from engine_fixtures.loadgen.latency import Percentiles, tpot_values
from engine_fixtures.loadgen.records import RequestRecord
from engine_fixtures.loadgen.stream import LoadStream, Segment
from engine_fixtures.loadgen.workload import WorkloadSpec
from engine_fixtures.sampling.base import SamplerSet
from engine_fixtures.sampling.cgroup import CgroupSampler
from engine_fixtures.sampling.cpu import CpuSampler
from engine_fixtures.sampling.gpu import GpuSampler
from engine_fixtures.sampling.host import PROBE_INTERVAL_S, HostSampler
from engine_fixtures.scenarios.refusal import telemetry_only, window_refusal
from engine_fixtures.scenarios.timeline import Timeline

CLIENT_BOUND_ATTEMPTS = 3
MAX_LOOP_LAG_P99_MS = 10.0
# Roles whose CPU is judged: SGLang's own serving processes. Helpers (multiprocessing's resource tracker,
# "other") are shown as cores only.
JUDGED_ROLES = ("http_server", "scheduler", "detokenizer", "detokenizer_router", "tokenizer_worker")


@dataclass(frozen=True)
class SegmentPlan:
    workload: WorkloadSpec  # concurrency, images, output length
    windows: int
    window_s: float
    warmup_s: float  # the nominal warm-up: it lasts until the requests sent in it have completed (Segment.measure_at)
    sample_hz: float = 10.0
    proof: bool = True  # read the proof counters around the segment (running requests, the IPC metrics)


def _engine_died_under(engine: EngineHandle, exc: BaseException) -> None:
    try:
        engine.ensure_alive()
    except ProcessCrashed as crashed:
        raise crashed from exc


def _client_bound(seg: Segment, plan: SegmentPlan) -> str | None:
    concurrency = plan.workload.concurrency or 1
    achieved = seg.in_flight_mean(seg.measure_at, seg.stop_at)
    if achieved < plan.workload.min_achieved_fraction * concurrency:
        return f"achieved concurrency {achieved:.1f} of {concurrency}"
    if seg.loop_lag_s and (lag := float(np.percentile(seg.loop_lag_s, 99)) * 1000) > MAX_LOOP_LAG_P99_MS:
        return f"client event-loop lag p99 {lag:.1f} ms"
    return None


def measure_segment(engine: EngineHandle, stream: LoadStream, plan: SegmentPlan, timeline: Timeline,
                    instance: str = "", check: Callable[[ArmProof, ArmProof], None] | None = None,
                    requests: list[dict[str, Any]] | None = None,
                    before: ArmProof | None = None, notes: set[str] | None = None) -> list[dict[str, float]]:
    """The windows' metric values (one dict per window, the per-segment values in the first); spans go to
    ``timeline``. The engine's proofs are read around the segment where it has them (``EngineSpec.proof``) and
    ``plan.proof`` asks for them. ``check(before, after)`` is given those proofs before the windows are returned (it
    raises to refuse them: an arm switched live on the engine checks that the segment's counters are the arm's).
    ``requests``, when given, gets each returned window's ``window_requests`` entry, in the same order. ``before``:
    a proof the caller read with no load since (a live switch's, ``EngineHandle.set_arm``), used as the first
    attempt's opening proof instead of a flush of its own. ``notes``, when given, gets one line for each field NVML
    did not report (``GpuSampler.unreported``)."""
    reasons = []
    # The proof counters feed the per-segment values and ``check``; reading them costs a proof flush on each side of
    # the segment (one, after a live switch that just read one).
    proof = plan.proof and engine.spec.proof
    interval = 1.0 / plan.sample_hz
    for _ in range(CLIENT_BOUND_ATTEMPTS):
        first = (before or engine.proof()) if proof else None
        before = None  # a segment measured again opens with a fresh proof: the previous attempt moved the counters
        cpu = CpuSampler(engine.pids, interval, engine.spec.cpu_quota)
        gpu = GpuSampler(engine.spec.gpus, engine.pids, interval)
        cgroup = [] if engine.quota is None else [CgroupSampler.for_quota(engine.quota, interval_s=interval)]
        try:
            with SamplerSet([cpu, gpu, HostSampler(probe_interval_s=min(PROBE_INTERVAL_S, plan.window_s / 4)),
                             *cgroup]) as samplers:
                seg = stream.segment(engine.url, plan.workload, plan.warmup_s, plan.windows * plan.window_s)
        except Exception as exc:
            _engine_died_under(engine, exc)
            raise
        engine.ensure_alive()
        timeline.add("warmup", "warmup", seg.start, seg.measure_at, instance)
        timeline.add("drain", "drain", seg.stop_at, seg.end, instance)
        reason = _client_bound(seg, plan)
        if reason is None:
            last = engine.proof() if proof else None
            if check is not None and first is not None and last is not None:
                check(first, last)
            out = []
            for k in range(plan.windows):
                t0 = seg.measure_at + k * plan.window_s
                t1 = t0 + plan.window_s
                out.append(window_values(seg, samplers, t0, t1))
                why = window_refusal(out[-1])
                timeline.add("window", f"window {k + 1}" + (f" refused: {why}" if why else ""), t0, t1, instance)
            per_segment = segment_values(seg, first, last)
            if any(window_refusal(w) for w in out):  # they span the refused window too
                per_segment = {k: v for k, v in per_segment.items() if not metric(k).judged}
            out[0].update(per_segment)
            if notes is not None:
                notes.update(gpu.unreported.values())
            if requests is not None:
                requests.extend(window_requests(seg, seg.measure_at + k * plan.window_s,
                                                seg.measure_at + (k + 1) * plan.window_s) for k in range(plan.windows))
            return out
        timeline.add("warmup", f"client-bound segment, measured again ({reason})", seg.measure_at, seg.stop_at,
                     instance)
        reasons.append(reason)
    raise MeasurementError(f"the load client, not the engine, limited {CLIENT_BOUND_ATTEMPTS} segments in a row "
                           f"against {engine.url} ({'; '.join(reasons)}); such windows are never recorded: pin the "
                           "client to free CPUs (--perf-client-cpus), or lower the concurrency")


def window_values(seg: Segment, samplers: SamplerSet, t0: float, t1: float) -> dict[str, float]:
    """The metric values of the window ``[t0, t1)`` (absolute times) of ``seg`` (see the module docstring)."""
    done = seg.completed_in(t0, t1)
    span = t1 - t0
    if not done:
        raise MeasurementError(f"zero completed requests in the window [{t0 - seg.start:.2f}, {t1 - seg.start:.2f}] "
                               f"s of a segment against {seg.url}: the engine served nothing (stalled?); see its log")
    rate = seg.progress_rate(t0, t1)  # > 0: a request that finished in the window spent some of its life in it
    ttft = Percentiles.of_seconds((r.ttft_s for r in done), "TTFT")
    tpot = tpot_values(done)
    values = {"requests_per_s": rate, "requests_per_s_counted": len(done) / span, "requests_completed": len(done),
              "output_tokens_per_s": seg.output_tokens_in(t0, t1) / span,
              "ttft_p50_ms": ttft.p50, "ttft_p99_ms": ttft.p99, "achieved_concurrency": seg.in_flight_mean(t0, t1)}
    if tpot:
        per_request = Percentiles.of_seconds(tpot, "TPOT")
        values["tpot_p50_ms"] = per_request.p50
        if math.isfinite(per_request.gmean):
            values["tpot_gmean_ms"] = per_request.gmean
    cut: dict[str, float] = {}
    for sampler in samplers.active:
        with contextlib.suppress(AttributeError):
            cut.update(sampler.cut(t0, t1))  # type: ignore[attr-defined]
    for key, value in cut.items():
        parts = key.split(".")
        if parts[0] == "cpu" and parts[-1] == "cores":
            values[f"cpu_cores.{parts[1]}"] = value
            if value > 0 and parts[1] in JUDGED_ROLES:  # an idle role has no CPU per request (and zero no log)
                values[f"cpu_s_per_request.{parts[1]}"] = value / rate  # cores * span / (rate * span)
        elif parts[0] == "cpu" and parts[-1] == "share_of_quota" and parts[1] in JUDGED_ROLES:
            values[f"cpu_share_of_quota.{parts[1]}"] = value
    if "cgroup.throttled_ratio" in cut:  # report-only: how often the quota stopped the engine's tree
        values["throttled_ratio"] = cut["cgroup.throttled_ratio"]
    # GPU utilisation and the GPU's telemetry (report-only): gpu.util.mean -> gpu_util_mean, gpu.temp_c.max -> ...
    # except gpu.sm_util.<role> -> gpu_sm_util.<role> (a role's name keeps its dot, as cpu_cores.<role>)
    values.update({key.replace(".", "_", 1 if key.startswith("gpu.sm_util.") else -1): value
                   for key, value in cut.items() if key.startswith("gpu.")})
    # The host's CPU state (report-only): steal time and the fixed probe, host.x -> host_x.
    values.update({key.replace(".", "_"): value for key, value in cut.items() if key.startswith("host.")})
    return telemetry_only(values) if window_refusal(values) is not None else values


def segment_values(seg: Segment, before: ArmProof | None, after: ArmProof | None) -> dict[str, float]:
    """The per-segment values of ``seg`` from the engine's proofs around it (None: not read), for its first window
    only (see the module docstring)."""
    values: dict[str, float] = {}
    if seg.loop_lag_s:
        values["client_loop_lag_p99_ms"] = float(np.percentile(seg.loop_lag_s, 99)) * 1000
    if before is None or after is None:
        return values
    running = running_requests(before, after)
    if running is None:
        raise MeasurementError(f"no scheduler process of the engine at {seg.url} counted a running batch over a "
                               "segment that served requests, so its running requests are unknown; the running-batch "
                               f"probe says: {'; '.join(probe_states(after)) or 'no scheduler process wrote a proof'}")
    values["running_requests_max"] = running.max
    values["running_requests_mean"] = running.mean
    then, now = before.summary(), after.summary()
    counters = {k: v - then.get(k, 0.0) for k, v in now.items()}
    rebuilds = counters.get("ipc_rebuilds", 0.0)
    if rebuilds > 0:
        values["ipc_opens_per_image"] = counters.get("ipc_opens", 0.0) / rebuilds
        values["rebuild_ms_per_image"] = 1000 * counters.get("ipc_rebuild_s", 0.0) / rebuilds
    return values


REQUEST_COLUMNS = ("sent_s", "first_token_s", "end_s", "output_tokens")
_DECIMALS = 4  # stored times in 0.1 ms steps


def window_requests(seg: Segment, t0: float, t1: float) -> dict[str, Any]:
    """The requests behind the window ``[t0, t1)`` (absolute times), JSON-ready, for ``RunResult.metadata``:

        {"origin_s": 1234.5678,      # CLOCK_MONOTONIC s of the segment's first send (Segment.start): the origin
                                     # of every time below; the windows of one segment share it
         "t0_s": 3.0, "t1_s": 6.0,   # the window marks, relative to the origin
         "columns": ["sent_s", "first_token_s", "end_s", "output_tokens"],
         "rows": [[2.6012, 2.6391, 3.3107, 128], ...]}   # every request whose lifetime overlaps the window

    Times are rounded to 0.1 ms. A request that spans two windows of a segment appears in both (the same
    ``origin_s`` and row). From the rows, ``stored_window`` rebuilds records the window's counted and continuous
    rates, TTFT and TPOT are computed from (token times other than the first are not kept)."""
    lo, hi = t0 - seg.start, t1 - seg.start
    rows = [[round(r.sent_s, _DECIMALS), round(r.token_times_s[0] if r.token_times_s else r.end_s, _DECIMALS),
             round(r.end_s, _DECIMALS), r.output_tokens] for r in seg.records if r.sent_s < hi and r.end_s >= lo]
    return {"origin_s": round(seg.start, _DECIMALS), "t0_s": round(lo, _DECIMALS), "t1_s": round(hi, _DECIMALS),
            "columns": list(REQUEST_COLUMNS), "rows": rows}


def stored_window(window: Mapping[str, Any]) -> tuple[float, float, tuple[RequestRecord, ...]]:
    """``window_requests``'s inverse: the window marks and its requests as records (``index`` the row, the first
    token the only token time). ``ValueError`` names what is wrong with a malformed entry."""
    try:
        columns, rows = tuple(window["columns"]), window["rows"]
        lo, hi = float(window["t0_s"]), float(window["t1_s"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"a stored window needs t0_s, t1_s, columns and rows (as window_requests writes): {exc!r}"
                         ) from None
    if columns != REQUEST_COLUMNS:
        raise ValueError(f"stored request columns {list(columns)} are not {list(REQUEST_COLUMNS)}: written by another "
                         "version of engine_fixtures.scenarios.segment; read it with that version")
    records = tuple(RequestRecord(i, False, float(sent), float(sent), float(end), (float(first),), int(n), "usage")
                    for i, (sent, first, end, n) in enumerate(rows))
    return lo, hi, records

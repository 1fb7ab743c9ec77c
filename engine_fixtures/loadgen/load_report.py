"""``LoadReport``: per-request records plus the run summary, and its metric samples."""

from __future__ import annotations

import math
from dataclasses import dataclass

from engine_fixtures.errors import MeasurementError
from engine_fixtures.loadgen.client import RawRun
from engine_fixtures.loadgen.latency import (
    Percentiles,
    closed_loop_window,
    itl_values,
    rate_of,
    time_weighted_in_flight,
    tpot_values,
)
from engine_fixtures.loadgen.records import LoadError, RequestRecord
from engine_fixtures.loadgen.workload import WorkloadSpec


@dataclass(frozen=True)
class LoadReport:
    """A successful load run. Latencies are over measured (non-warmup) requests. ``client_bound`` is
    True when the client, not the server, limited the run: achieved < ``min_achieved_fraction`` of the
    requested load, scheduling delay or event-loop lag p99 over ``max_scheduling_delay_p99_ms``, or the
    client near a full core (``client_bound_reason`` says which). Such a run is not engine performance."""

    spec: WorkloadSpec
    url: str
    records: tuple[RequestRecord, ...]
    completed: int
    duration_s: float
    requests_per_s: float
    output_tokens_per_s: float
    tokens_from: str
    ttft: Percentiles
    tpot: Percentiles | None
    itl: Percentiles | None
    e2e: Percentiles
    scheduling_delay: Percentiles
    requested_concurrency: int | None
    achieved_concurrency: float
    requested_rate: float | None
    scheduled_rate: float | None
    achieved_rate: float | None
    client_cpu_fraction: float
    loop_lag: Percentiles | None
    client_bound: bool
    client_bound_reason: str
    clock_origin: float = 0.0

    def to_samples(self) -> dict[str, float]:
        """Metric name (exactly as in ``judge.metrics.METRICS``) -> value for this run. TPOT/ITL are
        left out when every response had a single token; richer figures stay on the report itself."""
        out = {
            "requests_per_s": self.requests_per_s,
            "output_tokens_per_s": self.output_tokens_per_s,
            "ttft_p50_ms": self.ttft.p50,
            "ttft_p99_ms": self.ttft.p99,
            "e2e_p50_ms": self.e2e.p50,
            "scheduling_delay_p99_ms": self.scheduling_delay.p99,
            "achieved_concurrency": self.achieved_concurrency,
        }
        if self.tpot is not None:
            out["tpot_p50_ms"] = self.tpot.p50
            if math.isfinite(self.tpot.gmean):
                out["tpot_gmean_ms"] = self.tpot.gmean
        if self.itl is not None:
            out["itl_p50_ms"] = self.itl.p50
        return out

    def summary_line(self) -> str:
        load = (
            f"C={self.requested_concurrency} achieved {self.achieved_concurrency:.1f}"
            if self.requested_concurrency is not None
            else f"rate {self.requested_rate:g}/s scheduled {self.scheduled_rate:.1f} achieved {self.achieved_rate:.1f}"
        )
        lag = f"{self.loop_lag.p99:.2f} ms" if self.loop_lag is not None else "n/a"
        bound = f" CLIENT-BOUND: {self.client_bound_reason}" if self.client_bound else ""
        return (
            f"{self.completed} req in {self.duration_s:.2f}s = {self.requests_per_s:.1f} req/s, "
            f"{self.output_tokens_per_s:.0f} tok/s; TTFT p50 {self.ttft.p50:.2f} ms; {load}; sched delay p99 "
            f"{self.scheduling_delay.p99:.3f} ms; loop lag p99 {lag}; client CPU {self.client_cpu_fraction:.0%}{bound}"
        )


def build_report(spec: WorkloadSpec, url: str, raw: RawRun) -> LoadReport:
    """Summarise ``raw``. Raises ``LoadError`` (with every per-request error) if any request failed,
    ``MeasurementError`` if no measured request completed."""
    failed = tuple(r.error for r in raw.records if r.error is not None)
    if failed:
        kinds = sorted({e.kind for e in failed})
        shown = "\n  ".join(str(e) for e in failed[:5])
        raise LoadError(
            f"{len(failed)} of {len(raw.records)} requests to {url} failed ({', '.join(kinds)}); first:\n  {shown}",
            failed,
        )
    measured = [r for r in raw.records if not r.warmup]
    if not measured:
        raise MeasurementError(f"zero completed measured requests against {url}: nothing to report")
    first = min(r.sent_s for r in measured)
    last = max(r.end_s for r in measured)
    duration = last - first
    if not duration > 0:
        raise MeasurementError(f"measured window of {duration} s against {url}: clock did not advance")
    tokens = sum(r.output_tokens for r in measured)
    sources = {r.tokens_from for r in measured}
    tpots, itls = tpot_values(measured), itl_values(measured)
    sched = Percentiles.of_seconds((r.scheduling_delay_s for r in measured), "scheduling delay")
    cpu_fraction = raw.cpu_s / raw.wall_s if raw.wall_s > 0 else 0.0
    reasons: list[str] = []
    requested_rate = scheduled_rate = achieved_rate = None
    if spec.concurrency is not None:
        start, end = closed_loop_window(raw.records, raw.exhausted_s)
        achieved = time_weighted_in_flight(raw.records, start, end)
        if achieved < spec.min_achieved_fraction * spec.concurrency:
            reasons.append(
                f"achieved concurrency {achieved:.1f} < {spec.min_achieved_fraction:.0%} of {spec.concurrency}"
            )
    else:
        achieved = time_weighted_in_flight(measured, first, last)
        requested_rate = spec.request_rate
        if len(measured) >= 2:
            scheduled_rate = rate_of(sorted(r.intended_s for r in measured))
            achieved_rate = rate_of(sorted(r.sent_s for r in measured))
            if achieved_rate < spec.min_achieved_fraction * scheduled_rate:
                reasons.append(
                    f"achieved rate {achieved_rate:.1f}/s < {spec.min_achieved_fraction:.0%} of the scheduled "
                    f"{scheduled_rate:.1f}/s"
                )
    if sched.p99 > spec.max_scheduling_delay_p99_ms:
        reasons.append(f"scheduling delay p99 {sched.p99:.2f} ms > {spec.max_scheduling_delay_p99_ms:g} ms")
    loop_lag = Percentiles.of_seconds(raw.loop_lag_s, "event-loop lag") if raw.loop_lag_s else None
    if loop_lag is not None and loop_lag.p99 > spec.max_scheduling_delay_p99_ms:
        reasons.append(f"event-loop lag p99 {loop_lag.p99:.2f} ms > {spec.max_scheduling_delay_p99_ms:g} ms")
    if cpu_fraction >= spec.max_client_cpu_fraction:
        reasons.append(f"client process at {cpu_fraction:.0%} of a core")
    return LoadReport(
        spec=spec,
        url=url,
        records=raw.records,
        completed=len(measured),
        duration_s=duration,
        requests_per_s=len(measured) / duration,
        output_tokens_per_s=tokens / duration,
        tokens_from="usage" if sources == {"usage"} else ("chunks" if sources == {"chunks"} else "mixed"),
        ttft=Percentiles.of_seconds((r.ttft_s for r in measured), "TTFT"),
        tpot=Percentiles.of_seconds(tpots, "TPOT") if tpots else None,
        itl=Percentiles.of_seconds(itls, "inter-token latency") if itls else None,
        e2e=Percentiles.of_seconds((r.e2e_s for r in measured), "end-to-end latency"),
        scheduling_delay=sched,
        requested_concurrency=spec.concurrency,
        achieved_concurrency=achieved,
        requested_rate=requested_rate,
        scheduled_rate=scheduled_rate,
        achieved_rate=achieved_rate,
        client_cpu_fraction=cpu_fraction,
        loop_lag=loop_lag,
        client_bound=bool(reasons),
        client_bound_reason="; ".join(reasons),
        clock_origin=raw.origin,
    )

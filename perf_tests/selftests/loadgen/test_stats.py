"""Metric computations on synthetic records: percentiles, TPOT, ITL, achieved concurrency and rate,
client-bound detection, and failures that must never become numbers."""

from __future__ import annotations

import numpy as np
import pytest

from engine_fixtures.errors import MeasurementError
from engine_fixtures.judge.metrics import METRICS
from engine_fixtures.loadgen import LoadError, Percentiles, RequestError, RequestRecord, WorkloadSpec
from engine_fixtures.loadgen.arrivals import poisson_arrivals
from engine_fixtures.loadgen.client import RawRun
from engine_fixtures.loadgen.latency import rate_of, time_weighted_in_flight
from engine_fixtures.loadgen.load_report import build_report


def rec(
    index: int,
    sent: float,
    tokens: tuple[float, ...],
    end: float,
    *,
    intended: float | None = None,
    warmup: bool = False,
    error: RequestError | None = None,
) -> RequestRecord:
    return RequestRecord(
        index, warmup, sent if intended is None else intended, sent, end, tokens, len(tokens), "usage", error
    )


def test_percentiles_match_numpy_and_refuse_empty() -> None:
    values = [0.001 * v for v in range(1, 101)]
    p = Percentiles.of_seconds(values, "x")
    assert (p.p50, p.p90, p.p99) == pytest.approx(tuple(np.percentile(np.arange(1, 101), [50, 90, 99])))
    assert p.mean == pytest.approx(50.5)
    assert p.count == 100
    with pytest.raises(MeasurementError, match="no TTFT values"):
        Percentiles.of_seconds([], "TTFT")


def test_ttft_tpot_itl_e2e_of_one_record() -> None:
    r = rec(0, 1.0, (1.05, 1.06, 1.08, 1.11), 1.12)
    assert r.ttft_s == pytest.approx(0.05)
    assert r.e2e_s == pytest.approx(0.12)
    assert r.tpot_s == pytest.approx((0.12 - 0.05) / 3)
    assert r.itl_s == pytest.approx((0.01, 0.02, 0.03))
    assert rec(1, 0.0, (0.5,), 0.6).tpot_s is None


def test_time_weighted_in_flight() -> None:
    records = [rec(0, 0.0, (1.0,), 2.0), rec(1, 1.0, (2.0,), 3.0), rec(2, 5.0, (6.0,), 9.0)]
    # Window [0, 4]: request 0 busy 2 s, request 1 busy 2 s, request 2 outside -> 4 / 4.
    assert time_weighted_in_flight(records, 0.0, 4.0) == pytest.approx(1.0)
    assert time_weighted_in_flight(records, 1.0, 2.0) == pytest.approx(2.0)
    with pytest.raises(MeasurementError, match="empty measurement window"):
        time_weighted_in_flight(records, 2.0, 2.0)


def test_rate_and_poisson_schedule() -> None:
    assert rate_of([0.0, 0.5, 1.0, 2.0]) == pytest.approx(1.5)
    with pytest.raises(MeasurementError):
        rate_of([1.0])
    arrivals = poisson_arrivals(100.0, 20000, seed=3)
    assert arrivals[0] == 0.0
    assert rate_of(arrivals.tolist()) == pytest.approx(100.0, rel=0.03)
    assert np.array_equal(arrivals, poisson_arrivals(100.0, 20000, seed=3))


def _closed_run(delay: float, exhausted: float, cpu: float = 0.1, lags: tuple[float, ...] = ()) -> RawRun:
    # Two slots, each request 1 s long with `delay` between a slot freeing and the next send.
    records = []
    for slot in range(2):
        t = 0.0
        for k in range(3):
            index = slot * 3 + k
            records.append(rec(index, t + delay if k else t, (t + 0.5, t + 0.75), t + 1.0, intended=t if k else 0.0))
            t = t + 1.0 + (delay if k else 0.0)
    return RawRun(tuple(records), exhausted, wall_s=3.0, cpu_s=cpu, loop_lag_s=lags)


def test_report_closed_loop_summary_and_samples() -> None:
    spec = WorkloadSpec(num_requests=6, concurrency=2, output_tokens=2)
    report = build_report(spec, "http://x", _closed_run(0.0, exhausted=2.0))
    assert report.completed == 6
    assert report.requests_per_s == pytest.approx(6 / 3.0)
    assert report.output_tokens_per_s == pytest.approx(12 / 3.0)
    assert report.ttft.p50 == pytest.approx(500.0)
    assert report.tpot is not None
    assert report.tpot.p50 == pytest.approx(500.0)
    assert report.achieved_concurrency == pytest.approx(2.0)
    assert not report.client_bound
    samples = report.to_samples()
    assert set(samples) <= set(METRICS), "every sample must be a registered metric"
    assert samples["ttft_p50_ms"] == pytest.approx(500.0)
    assert samples["achieved_concurrency"] == pytest.approx(2.0)
    assert {
        "requests_per_s",
        "output_tokens_per_s",
        "ttft_p99_ms",
        "tpot_p50_ms",
        "itl_p50_ms",
        "e2e_p50_ms",
        "scheduling_delay_p99_ms",
    } <= set(samples)


def test_report_flags_a_late_or_busy_client() -> None:
    spec = WorkloadSpec(num_requests=6, concurrency=2, output_tokens=2)
    late = build_report(spec, "http://x", _closed_run(0.2, exhausted=2.2))
    assert late.client_bound
    assert "scheduling delay p99 200.00 ms > 10 ms" in late.client_bound_reason
    assert "achieved concurrency" in late.client_bound_reason
    busy = build_report(spec, "http://x", _closed_run(0.0, exhausted=2.0, cpu=2.99))
    assert busy.client_bound
    assert "client process at 100% of a core" in busy.client_bound_reason


def test_report_open_loop_rates() -> None:
    spec = WorkloadSpec(num_requests=5, request_rate=10.0, output_tokens=1)
    intended = [0.0, 0.1, 0.2, 0.3, 0.4]
    sent = [0.0, 0.1, 0.2, 0.3, 0.8]  # the last request went out 400 ms late
    records = tuple(
        rec(i, s, (s + 0.01,), s + 0.02, intended=t) for i, (t, s) in enumerate(zip(intended, sent, strict=True))
    )
    report = build_report(spec, "http://x", RawRun(records, None, 1.0, 0.1))
    assert report.scheduled_rate == pytest.approx(10.0)
    assert report.achieved_rate == pytest.approx(5.0)
    assert report.client_bound
    assert "achieved rate 5.0/s" in report.client_bound_reason
    assert report.scheduling_delay.count == 5


def test_any_error_fails_loudly_and_zero_completed_is_an_error() -> None:
    spec = WorkloadSpec(num_requests=2, concurrency=1, warmup_requests=1, output_tokens=1)
    err = RequestError(2, 500, "http_status", "HTTP 500", "boom")
    run = RawRun(
        (rec(0, 0.0, (0.1,), 0.2, warmup=True), rec(1, 0.2, (0.3,), 0.4), rec(2, 0.4, (), 0.5, error=err)),
        None,
        1.0,
        0.1,
    )
    with pytest.raises(LoadError) as info:
        build_report(spec, "http://x", run)
    assert info.value.errors == (err,)
    assert "request #2 HTTP 500 [http_status] HTTP 500 body: 'boom'" in str(info.value)
    only_warmup = RawRun((rec(0, 0.0, (0.1,), 0.2, warmup=True),), None, 1.0, 0.1)
    with pytest.raises(MeasurementError, match="zero completed measured requests"):
        build_report(spec, "http://x", only_warmup)


def test_report_flags_event_loop_lag() -> None:
    spec = WorkloadSpec(num_requests=6, concurrency=2, output_tokens=2)
    calm = build_report(spec, "http://x", _closed_run(0.0, exhausted=2.0, lags=(0.0001,) * 50))
    assert calm.loop_lag is not None
    assert calm.loop_lag.p50 == pytest.approx(0.1)
    assert not calm.client_bound
    starved = build_report(spec, "http://x", _closed_run(0.0, exhausted=2.0, lags=(0.0001,) * 50 + (0.05,) * 2))
    assert starved.client_bound
    assert "event-loop lag p99" in starved.client_bound_reason

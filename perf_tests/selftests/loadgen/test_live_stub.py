"""The client against the stub: latencies it must measure, and the concurrency / rate it must hold,
checked from the client's report AND from the server's own arrival/completion times."""

from __future__ import annotations

import pytest

from engine_fixtures.loadgen import WorkloadSpec, run_load
from perf_tests.selftests.loadgen.conftest import loadgen_children, server_in_flight, stub_stats
from perf_tests.support.stub_process import StubServer


def test_measures_stub_ttft_and_tpot(stub: StubServer) -> None:
    spec = WorkloadSpec(num_requests=40, concurrency=4, warmup_requests=4, image_resolution=(32, 32), output_tokens=16)
    report = run_load(f"{stub.url}/v1/chat/completions?ttft_ms=50&itl_ms=5", spec, progress=True)
    assert 48.0 <= report.ttft.p50 <= 75.0, report.ttft
    assert report.tpot is not None
    assert 4.8 <= report.tpot.p50 <= 7.5, report.tpot
    assert report.itl is not None
    assert 4.0 <= report.itl.p50 <= 7.5, report.itl
    assert 48.0 + 15 * 4.8 <= report.e2e.p50 <= 75.0 + 15 * 7.5
    assert report.tokens_from == "usage"
    assert report.completed == 40
    assert all(r.output_tokens == 16 for r in report.records)
    assert sum(r.warmup for r in report.records) == 4
    assert loadgen_children() == []


@pytest.mark.parametrize("concurrency", [1, 16, 256, pytest.param(1024, marks=pytest.mark.slow)])
def test_closed_loop_holds_requested_concurrency(stub: StubServer, concurrency: int) -> None:
    # Each request lasts >= (concurrency + 40) ms so ~1000 req/s at most: well within one core.
    ttft_ms = max(20, concurrency)
    spec = WorkloadSpec(
        num_requests=4 * concurrency + 8,
        concurrency=concurrency,
        warmup_requests=concurrency,
        images_per_request=0,
        output_tokens=8,
    )
    stub_stats(stub.url)
    report = run_load(f"{stub.url}/v1/chat/completions?ttft_ms={ttft_ms}&itl_ms=5", spec)
    arrivals, completions, connections = stub_stats(stub.url)
    assert report.achieved_concurrency == pytest.approx(concurrency, rel=0.03)
    # The server's own view, independent of the client's bookkeeping: the keep-alive pool opened exactly
    # C sockets (plus the stats call) and the server really had C requests at once. Its time-weighted
    # mean is not asserted: on a shared 2-core box it also counts the stub's own scheduling lag.
    assert connections == concurrency + 1
    n = len(completions)
    in_flight = server_in_flight(arrivals, completions, completions[n // 4], completions[3 * n // 4])
    assert in_flight.max() >= 0.95 * concurrency, f"server-side mean in flight {in_flight.mean():.1f}"
    assert report.scheduling_delay.p99 < 2.0


def test_open_loop_achieves_requested_rate(stub: StubServer) -> None:
    spec = WorkloadSpec(
        num_requests=400, request_rate=200.0, warmup_requests=20, images_per_request=0, output_tokens=4, seed=7
    )
    stub_stats(stub.url)
    report = run_load(f"{stub.url}/v1/chat/completions?itl_ms=2", spec)
    arrivals, _, _ = stub_stats(stub.url)
    assert report.scheduled_rate is not None
    assert report.achieved_rate is not None
    assert report.scheduled_rate == pytest.approx(200.0, rel=0.15)  # one seeded Poisson draw of 400 gaps
    assert report.achieved_rate == pytest.approx(report.scheduled_rate, rel=0.05)
    server_rate = (len(arrivals) - 21) / (arrivals[-1] - arrivals[20])
    assert server_rate == pytest.approx(report.scheduled_rate, rel=0.05)
    assert report.scheduling_delay.p50 < 5.0

"""Bad servers: every failure is a counted error with context, never a silent drop or a 0 ms latency,
and the load process is always reaped (also when the run is killed at its deadline)."""

from __future__ import annotations

import socket

import pytest

from engine_fixtures.errors import ConfigError, MeasurementError
from engine_fixtures.loadgen import LoadError, WorkloadSpec, run_load
from perf_tests.selftests.loadgen.conftest import loadgen_children
from perf_tests.support.stub_process import StubServer

SPEC = WorkloadSpec(num_requests=6, concurrency=2, images_per_request=0, output_tokens=6, request_timeout_s=10)


def _fail(stub: StubServer, query: str, spec: WorkloadSpec = SPEC) -> LoadError:
    with pytest.raises(LoadError) as info:
        run_load(f"{stub.url}/v1/chat/completions?{query}", spec)
    assert loadgen_children() == []
    return info.value


def test_refused_connection_is_an_error_per_request() -> None:
    with socket.socket() as sock:  # a port that was free a moment ago and has no listener
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(LoadError) as info:
        run_load(f"http://127.0.0.1:{port}", SPEC)
    errors = info.value.errors
    assert len(errors) == SPEC.total_requests
    assert {e.kind for e in errors} == {"connect"}
    assert sorted(e.index for e in errors) == list(range(SPEC.total_requests))
    assert "6 of 6 requests" in str(info.value)


@pytest.mark.parametrize("status", [429, 503])
def test_http_status_carries_status_and_body(stub: StubServer, status: int) -> None:
    error = _fail(stub, f"fail=status:{status}&every=3")
    assert len(error.errors) == 2
    assert {(e.kind, e.status) for e in error.errors} == {("http_status", status)}
    assert "stub failure" in error.errors[0].snippet
    assert f"HTTP {status}" in str(error)


@pytest.mark.parametrize(
    ("query", "kind", "text"),
    [
        ("fail=cut", "stream_cut", "after"),
        ("fail=malformed", "malformed_sse", "not an SSE field"),
        ("fail=nodone", "no_done", "without 'data: [DONE]'"),
        ("fail=short", "token_count", "expected exactly 6 output tokens"),
    ],
)
def test_broken_streams_are_counted_with_context(stub: StubServer, query: str, kind: str, text: str) -> None:
    error = _fail(stub, f"{query}&every=2&itl_ms=1")
    assert len(error.errors) == SPEC.total_requests // 2
    assert {e.kind for e in error.errors} == {kind}
    assert text in str(error.errors[0])
    assert all(e.status == 200 for e in error.errors)


def test_missing_usage_falls_back_to_chunk_count_and_says_so(stub: StubServer) -> None:
    report = run_load(f"{stub.url}/v1/chat/completions?fail=nousage", SPEC)
    assert report.tokens_from == "chunks"
    assert all(r.output_tokens == 6 for r in report.records)


def test_timeout_is_an_error_not_a_latency(stub: StubServer) -> None:
    spec = WorkloadSpec(num_requests=2, concurrency=2, images_per_request=0, output_tokens=2, request_timeout_s=0.3)
    error = _fail(stub, "ttft_ms=3000", spec)
    assert {e.kind for e in error.errors} == {"timeout"}


def test_run_past_its_deadline_is_killed_and_reaped(stub: StubServer) -> None:
    spec = WorkloadSpec(num_requests=2, concurrency=1, images_per_request=0, output_tokens=2)
    with pytest.raises(MeasurementError, match="did not finish within 3 s"):
        run_load(f"{stub.url}/v1/chat/completions?ttft_ms=20000", spec, deadline_s=3)
    assert loadgen_children() == []


def test_bad_url_and_cpus_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="expected http://host:port"):
        run_load("localhost:30000", SPEC)
    with pytest.raises(ConfigError, match="cpus=\\(4096,\\)"):
        run_load("http://127.0.0.1:1", SPEC, cpus=[4096])


def test_pinned_client_run_completes(stub: StubServer) -> None:
    report = run_load(stub.url, SPEC, cpus=[0])
    assert report.completed == SPEC.num_requests

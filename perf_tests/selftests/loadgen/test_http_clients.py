"""Both HTTP clients: ``http_client`` is validated, the aiohttp fallback keeps the same error
semantics, and the lean ``fast`` client handles HTTP shapes the stub never sends (Content-Length
SSE bodies, ``Connection: close``, bytes that are not HTTP)."""

from __future__ import annotations

import socketserver
import threading
from collections.abc import Iterator

import pytest

from engine_fixtures.errors import ConfigError
from engine_fixtures.loadgen import LoadError, WorkloadSpec, run_load
from perf_tests.selftests.loadgen.conftest import loadgen_children
from perf_tests.support.stub_process import StubServer

SPEC = WorkloadSpec(num_requests=6, concurrency=2, images_per_request=0, output_tokens=3, request_timeout_s=10)
AIOHTTP = WorkloadSpec(
    num_requests=6, concurrency=2, images_per_request=0, output_tokens=6, request_timeout_s=10, http_client="aiohttp"
)
_TOKEN = b'data: {"choices":[{"index":0,"delta":{"content":"t"}}]}\n\n'
_SSE = _TOKEN * 3 + b'data: {"choices":[],"usage":{"completion_tokens":3}}\n\ndata: [DONE]\n\n'


def _chunked(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n0\r\n\r\n" % (len(payload), payload)


RESPONSES = {
    "length": b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s" % (len(_SSE), _SSE),
    "close": b"HTTP/1.1 200 OK\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n" + _chunked(_SSE),
    "garbage": b"NOT HTTP AT ALL\r\n\r\n",
}


class _Handler(socketserver.StreamRequestHandler):
    """Answers each request on a connection with ``RESPONSES[<path>]``; closes after ``close``/``garbage``."""

    def handle(self) -> None:
        self.server.connections += 1  # type: ignore[attr-defined]
        while True:
            head = b""
            while not head.endswith(b"\r\n\r\n"):
                line = self.rfile.readline()
                if not line:
                    return
                head += line
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            self.rfile.read(length)
            mode = head.split(b" ")[1].decode().strip("/")
            self.wfile.write(RESPONSES[mode])
            self.wfile.flush()
            if mode != "length":
                return


@pytest.fixture(scope="module")
def canned() -> Iterator[socketserver.ThreadingTCPServer]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    server.connections = 0  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


def _url(server: socketserver.ThreadingTCPServer, mode: str) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}/{mode}"


def test_http_client_is_validated_and_fast_refuses_https() -> None:
    with pytest.raises(ConfigError, match="http_client='curl': must be one of fast, aiohttp"):
        WorkloadSpec(num_requests=2, concurrency=1, http_client="curl")
    with pytest.raises(ConfigError, match="use http_client='aiohttp'"):
        run_load("https://127.0.0.1:1", SPEC)


def test_fast_reads_content_length_bodies_on_one_keep_alive_connection_per_slot(
    canned: socketserver.ThreadingTCPServer,
) -> None:
    canned.connections = 0  # type: ignore[attr-defined]
    report = run_load(_url(canned, "length"), SPEC)
    assert report.completed == 6
    assert report.tokens_from == "usage"
    assert all(len(r.token_times_s) == 3 for r in report.records)
    assert canned.connections == 2  # type: ignore[attr-defined]


def test_fast_reconnects_after_connection_close(canned: socketserver.ThreadingTCPServer) -> None:
    canned.connections = 0  # type: ignore[attr-defined]
    report = run_load(_url(canned, "close"), SPEC)
    assert report.completed == 6
    assert canned.connections == SPEC.total_requests  # type: ignore[attr-defined]


def test_fast_counts_a_non_http_answer_as_an_error(canned: socketserver.ThreadingTCPServer) -> None:
    with pytest.raises(LoadError) as info:
        run_load(_url(canned, "garbage"), SPEC)
    assert len(info.value.errors) == SPEC.total_requests
    assert {e.kind for e in info.value.errors} == {"client"}
    assert "not a valid HTTP response" in str(info.value.errors[0])
    assert loadgen_children() == []


def test_aiohttp_transport_still_measures(stub: StubServer) -> None:
    report = run_load(f"{stub.url}/v1/chat/completions?itl_ms=1", AIOHTTP)
    assert report.completed == 6
    assert all(r.output_tokens == 6 for r in report.records)


@pytest.mark.parametrize(
    ("query", "kind"),
    [("fail=status:503", "http_status"), ("fail=cut", "stream_cut"), ("fail=nodone", "no_done")],
)
def test_aiohttp_transport_same_error_kinds(stub: StubServer, query: str, kind: str) -> None:
    with pytest.raises(LoadError) as info:
        run_load(f"{stub.url}/v1/chat/completions?{query}&every=2&itl_ms=1", AIOHTTP)
    assert {e.kind for e in info.value.errors} == {kind}
    assert len(info.value.errors) == AIOHTTP.total_requests // 2
    assert loadgen_children() == []

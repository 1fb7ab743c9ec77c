"""The load stream's segments against the stub: the warm-up lasts until every request sent in its ``warmup_s``, and the
first wave, has completed (the client's rule, ``stream_driver.warmup_end``), at any concurrency, in step or not; the
measured span
keeps its full length; a stall ends in an error that says what happened, never a hang. Assertions are on order and on
the rule; the few bounds on time are generous for a shared 2-core box."""

from __future__ import annotations

import math
import os
import re
import signal
import time
from collections.abc import Iterator

import psutil
import pytest

from engine_fixtures.errors import MeasurementError
from engine_fixtures.loadgen import WorkloadSpec
from engine_fixtures.loadgen.records import LoadError, RequestRecord
from engine_fixtures.loadgen.stream import LoadStream, Segment, finished_in
from engine_fixtures.loadgen.stream_driver import WARMUP_EPSILON_S
from engine_fixtures.scenarios.segment import window_requests
from perf_tests.support.stub_process import StubServer


@pytest.fixture(scope="module")
def stream() -> Iterator[LoadStream]:
    with LoadStream() as s:
        yield s


def workload(concurrency: int, **kw: float) -> WorkloadSpec:
    return WorkloadSpec(num_requests=concurrency, concurrency=concurrency, images_per_request=0, output_tokens=4, **kw)


def chat(stub: StubServer, query: str) -> str:
    return f"{stub.url}/v1/chat/completions?{query}"


def sent_in_warmup(seg: Segment, warmup_s: float) -> list[RequestRecord]:
    """The warm-up's requests: those sent before ``warmup_s`` and the first wave (the first ``concurrency`` sends)."""
    return [r for r in seg.records if r.sent_s < warmup_s or r.index < seg.spec.concurrency]


def check_rule(seg: Segment, warmup_s: float) -> None:
    """``measure_at`` is ``start + warmup_s``, or just after the latest completion of a warm-up request."""
    last = max((seg.start + r.end_s for r in sent_in_warmup(seg, warmup_s)), default=-math.inf)
    assert seg.measure_at == pytest.approx(max(seg.start + warmup_s, last + WARMUP_EPSILON_S), abs=1e-6)


@pytest.mark.parametrize(("concurrency", "ttft_ms"), [(4, "500"), (1, "400"), (4, "250,700,400,550,300")],
                         ids=["lockstep", "one-slot", "out-of-step"])
def test_the_warmup_lasts_until_every_request_sent_in_it_completed(stub: StubServer, stream: LoadStream,
                                                                   concurrency: int, ttft_ms: str) -> None:
    warmup_s, measure_s = 0.2, 1.5  # every request takes >= 250 ms, longer than the nominal warm-up
    seg = stream.segment(chat(stub, f"ttft_ms={ttft_ms}"), workload(concurrency), warmup_s, measure_s)
    check_rule(seg, warmup_s)
    warm = sent_in_warmup(seg, warmup_s)
    assert len(warm) >= concurrency  # the first request of every slot
    lo, hi = seg.measure_at - seg.start, seg.stop_at - seg.start
    # The windows start after the first requests completed, and no request of the nominal warm-up ends in them.
    assert lo > warmup_s
    assert lo > max(r.end_s for r in warm)
    assert finished_in(warm, lo, hi) == []
    stored = window_requests(seg, seg.measure_at, seg.measure_at + 0.5)  # as results files keep the first window
    assert stored["t0_s"] > max(round(r.end_s, 4) for r in warm)
    assert all(sent >= round(warmup_s, 4) for sent, *_ in stored["rows"])
    # The measured span keeps its length: sending stops measure_s after the warm-up's end, and went on until then.
    assert seg.stop_at - seg.measure_at == pytest.approx(measure_s, abs=1e-9)
    assert max(r.sent_s for r in seg.records) < hi
    assert any(r.sent_s >= lo for r in seg.records)
    assert seg.completed_in(seg.measure_at, seg.stop_at)
    assert seg.end >= seg.stop_at - WARMUP_EPSILON_S  # each slot retires when its last request ends after stop_at


def test_fast_requests_end_the_warmup_at_its_nominal_length(stub: StubServer, stream: LoadStream) -> None:
    warmup_s = 0.3
    seg = stream.segment(chat(stub, "ttft_ms=5"), workload(4), warmup_s, 0.5)
    check_rule(seg, warmup_s)
    # Only the requests in flight at start + warmup_s (5 ms each) hold it; 0.5 s is slack for a loaded box.
    assert seg.start + warmup_s <= seg.measure_at < seg.start + warmup_s + 0.5
    # A nominal warm-up of 0 s is the first wave: the windows start just after its last request ended, never at the
    # clock's origin (a live visit's warm-up after its switch).
    seg = stream.segment(chat(stub, "ttft_ms=200"), workload(4), 0.0, 0.6)
    check_rule(seg, 0.0)
    first = [r for r in seg.records if r.index < 4]
    assert len(first) == 4
    assert seg.measure_at == pytest.approx(seg.start + max(r.end_s for r in first) + WARMUP_EPSILON_S, abs=1e-6)
    assert seg.measure_at - seg.start >= 0.2  # a whole request of the first wave, at least
    assert finished_in(first, seg.measure_at - seg.start, seg.stop_at - seg.start) == []
    assert seg.stop_at == pytest.approx(seg.measure_at + 0.6, abs=1e-9)


def test_a_stalled_warmup_ends_in_an_error_that_says_so(stub: StubServer, stream: LoadStream) -> None:
    """Every request hangs: the warm-up ends when its requests' own timeout ends them, then the segment fails."""
    t0 = time.monotonic()
    with pytest.raises(LoadError, match=r"timeout.*the warm-up ended") as err:
        stream.segment(chat(stub, "ttft_ms=600000"), workload(2, request_timeout_s=1.0), 0.2, 0.5)
    assert time.monotonic() - t0 < 60.0  # about 2 s: never a hang
    assert {e.kind for e in err.value.errors} == {"timeout"}
    ended = re.search(r"the warm-up ended (\d+\.\d+) s in", str(err.value))
    assert ended is not None
    assert float(ended.group(1)) >= 0.99  # held open by its hung requests, until their 1 s timeout


def test_a_stuck_client_ends_in_the_deadline_error_never_a_hang(stub: StubServer) -> None:
    """The deadline is the backstop when the client itself cannot end its requests (here: stopped by a signal)."""
    spec = workload(2, request_timeout_s=0.5, connect_timeout_s=0.5)
    with LoadStream(build_s=0.5) as s:
        pid = s.pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        t0 = time.monotonic()
        with pytest.raises(MeasurementError, match=r"did not finish within 3 s \(.*warm-up.*the client itself is "
                                                   r"stuck.*the client was stopped"):
            s.segment(chat(stub, "ttft_ms=5"), spec, 0.2, 0.3)
        assert time.monotonic() - t0 < 30.0
        assert not psutil.pid_exists(pid)
        with pytest.raises(MeasurementError, match="stopped by an earlier failure"):
            s.segment(chat(stub, "ttft_ms=5"), spec, 0.2, 0.3)

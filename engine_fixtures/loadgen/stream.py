"""``LoadStream``: one load client process for a whole session, told where each segment starts and stops.

A segment is one stretch of closed-loop load against one engine: a warm-up that is never measured, then
``measure_s`` of load cut into windows by the caller (``scenarios.segment``), then a drain (the requests in flight
finish; no new one is sent). The warm-up lasts ``warmup_s`` and then until every request sent in those ``warmup_s``
has completed, so that the wave in flight at its nominal end (sent before it, on a visit's first seconds after an
arm switch) never lands in the first window; the client's driver decides where it ends (``Segment.measure_at``, the
rule in ``stream_driver``) and stops sending ``measure_s`` later. Between segments the client waits for its next
order, so an arm pays the client's start and the image encoding once per session and workload, not once per window.

The process is ``isolation.process.Supervised`` (pipes, the curated child environment, this process's cgroup,
optionally pinned to ``cpus``); ``close()`` stops it, and a dead client is ``ProcessCrashed``.

A window of a segment is read by three functions over request records, one rule each: ``finished_in`` (the
requests that finished in it), ``progress_rate`` (req/s counted continuously, not by completions: see why there)
and ``tokens_in`` (output tokens by their own timestamps); ``Segment``'s methods apply them to absolute times.
"""

from __future__ import annotations

import importlib.util
import pickle
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from engine_fixtures.errors import ConfigError, MeasurementError, ProcessCrashed
from engine_fixtures.isolation import owner
from engine_fixtures.isolation.process import CHILD_PASSTHROUGH, LaunchSpec, Supervised, curated_env
from engine_fixtures.loadgen.child import frame
from engine_fixtures.loadgen.client import RawRun
from engine_fixtures.loadgen.records import LoadError, RequestRecord
from engine_fixtures.loadgen.runner import FrameReader, check_cpus, endpoint_url
from engine_fixtures.loadgen.stream_child import SegmentOrder
from engine_fixtures.loadgen.workload import WorkloadSpec

_STOP_TIMEOUT_S = 10.0
BUILD_S = 120.0  # building a workload's bodies (encoding its images), the slack of every order's deadline


@dataclass(frozen=True)
class Segment:
    """What one segment measured. Times are CLOCK_MONOTONIC seconds (``time.monotonic()`` in any process):
    ``start`` the client's clock origin, taken just before the first send; ``measure_at`` the end of the warm-up, as
    the client decided it (``stream_driver.warmup_end``: ``start + warmup_s``, or just after the latest completion of a
    request sent before that or of the first wave, if later), where the first window starts; ``stop_at`` =
    ``measure_at + measure_s``, when sending stopped (no request is sent at or after it); ``end`` when the last request
    in flight finished. ``records`` hold times relative to ``start``."""

    url: str
    spec: WorkloadSpec
    start: float
    measure_at: float
    stop_at: float
    end: float
    records: tuple[RequestRecord, ...]
    loop_lag_s: tuple[float, ...]
    client_cpu_s: float

    def completed_in(self, t0: float, t1: float) -> list[RequestRecord]:
        """Requests that finished in ``[t0, t1)`` (absolute times)."""
        return finished_in(self.records, t0 - self.start, t1 - self.start)

    def progress_rate(self, t0: float, t1: float) -> float:
        """Requests per second over ``[t0, t1)`` (absolute times), counted continuously: ``progress_rate``."""
        return progress_rate(self.records, t0 - self.start, t1 - self.start)

    def output_tokens_in(self, t0: float, t1: float) -> float:
        """Output tokens generated in ``[t0, t1)`` (absolute times), by their own timestamps: ``tokens_in``."""
        return tokens_in(self.records, t0 - self.start, t1 - self.start)

    def in_flight_mean(self, t0: float, t1: float) -> float:
        """Time-weighted requests in flight over ``[t0, t1)``."""
        lo, hi = t0 - self.start, t1 - self.start
        return sum(max(0.0, min(r.end_s, hi) - max(r.sent_s, lo)) for r in self.records) / (hi - lo)


def finished_in(records: Iterable[RequestRecord], lo: float, hi: float) -> list[RequestRecord]:
    """Requests that finished in ``[lo, hi)`` (record times): the counted rate's numerator, and the requests whose
    latencies describe the window."""
    return [r for r in records if lo <= r.end_s < hi]


def progress_rate(records: Iterable[RequestRecord], lo: float, hi: float) -> float:
    """Requests per second over ``[lo, hi)`` (record times) as a time-weighted progress rate: each request adds the
    share of its lifetime (``sent_s`` .. ``end_s``) that lies inside the window; the sum is divided by its length.

    Why not completions / length: under closed-loop load with a fixed output length the requests finish in lockstep
    bursts (at concurrency 16 on an H200, 88 of 95 bursts were all 16 requests within ~4 ms), so a 3 s window holds
    4 or 5 bursts and the counted rate reads 21.33 or 26.67 req/s (whole bursts over 3 s) whatever the rate
    between them: counting made 84 % of the within-run variance. Progress accrues continuously, so the window's
    position against the bursts no longer matters. Over windows that tile a segment each request's shares sum to 1,
    so the rates average to the counted one; in one window the two differ by at most the requests in flight at one
    of its edges (at most the concurrency, one burst) over the window's length. A request with no lifetime
    (``end_s == sent_s``) counts whole where it ended."""
    if not hi > lo:
        raise MeasurementError(f"empty rate window [{lo:.6f}, {hi:.6f}) s")
    total = 0.0
    for r in records:
        life = r.end_s - r.sent_s
        if life > 0:
            total += max(0.0, min(r.end_s, hi) - max(r.sent_s, lo)) / life
        elif lo <= r.end_s < hi:
            total += 1.0
    return total / (hi - lo)


def tokens_in(records: Iterable[RequestRecord], lo: float, hi: float) -> float:
    """Output tokens generated in ``[lo, hi)`` (record times), each content chunk counted at the time it was read
    (as SGLang's steady-state benchmark counts them, sglang#30918): continuous like ``progress_rate``, where tokens
    of the requests that finished in the window would inherit the completions' bursts. A chunk carries
    ``output_tokens / chunks`` tokens, so a request's tokens sum to its ``output_tokens`` however its usage chunk
    counted them."""
    total = 0.0
    for r in records:
        times = r.token_times_s
        if times:
            total += r.output_tokens * sum(lo <= t < hi for t in times) / len(times)
    return total


class LoadStream:
    """Context manager: ``with LoadStream(cpus=...) as stream: seg = stream.segment(url, spec, 1.0, 15.0)``.
    ``build_s``: how long the client may take to build a workload's bodies (an order's share of its deadline)."""

    def __init__(self, cpus: Iterable[int] | None = None, build_s: float = BUILD_S) -> None:
        self.cpus = check_cpus(cpus)
        self.build_s = build_s
        self.segments = 0
        self._pending = 0  # prepare() orders whose answer is not read yet
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._child: Supervised | None = None
        self._reader: FrameReader | None = None
        self._stopped: str | None = None  # why the client was stopped inside the `with` block, if it was

    def __enter__(self) -> LoadStream:
        if importlib.util.find_spec("httptools") is None:
            raise ConfigError("the load stream's client needs httptools, which is not installed: `pip install "
                              "'httptools>=0.6,<1'` (a declared dependency of this suite)")
        self._tmp = owner.temp_dir("stream")
        launch = LaunchSpec((sys.executable, "-m", "engine_fixtures.loadgen.stream_child"),
                            Path(self._tmp.name, "load.log"), curated_env(passthrough=CHILD_PASSTHROUGH),
                            name="load stream", stdio="pipes", new_session=False, cpus=self.cpus)
        self._child = Supervised.start(launch)
        assert self._child.proc.stdout is not None
        self._reader = FrameReader(self._child.proc.stdout.fileno())
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    @property
    def pid(self) -> int | None:
        return self._child.pid if self._child is not None else None

    def close(self, ask: bool = True) -> None:
        """Stop the client: asked to quit (``Q``, read between orders) when ``ask``, else at once (it is in the middle
        of an order and would read nothing before answering it)."""
        child, self._child = self._child, None
        if child is not None:
            try:
                if ask and child.proc.poll() is None and child.proc.stdin is not None:
                    child.proc.stdin.write(frame(b"Q"))
                    child.proc.stdin.flush()
                    child.proc.wait(timeout=_STOP_TIMEOUT_S)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass  # stop() below ends it either way
            finally:
                child.stop(grace_s=0.0, kill_timeout_s=_STOP_TIMEOUT_S)
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def _tail(self) -> str:
        assert self._child is not None
        try:
            return self._child.spec.log_path.read_bytes()[-2000:].decode("utf-8", "replace")
        except OSError:
            return ""

    def _require(self, what: str) -> None:
        if self._stopped is not None:
            raise MeasurementError(f"LoadStream.{what}(): the session's load client was stopped by an earlier "
                                   f"failure ({self._stopped}); no later segment can be measured in this session")
        if self._child is None or self._child.proc.stdin is None:
            raise ConfigError(f"LoadStream.{what}() outside its `with` block: enter the stream first")

    def prepare(self, spec: WorkloadSpec) -> None:
        """Have the client build ``spec``'s bodies now, without waiting (the answer is read by the next segment)."""
        self._require("prepare")
        assert self._child is not None
        assert self._child.proc.stdin is not None
        self._child.proc.stdin.write(frame(b"B", pickle.dumps(spec)))
        self._child.proc.stdin.flush()
        self._pending += 1

    def _answer(self, deadline_s: float, what: str, why: str) -> bytes:
        assert self._reader is not None

        class _Count:
            value = 0

        kind, payload = self._reader.read(_Count(), time.monotonic() + deadline_s)
        if kind is None:
            self.close(ask=False)
            self._stopped = f"its {what} did not finish within {deadline_s:.0f} s"
            raise MeasurementError(f"the load stream's {what} did not finish within {deadline_s:.0f} s ({why}); the "
                                   "client was stopped")
        if kind == b"":
            raise ProcessCrashed(f"the load stream's client died with no result: {self._tail()}")
        if kind == b"E":
            message, trace = pickle.loads(payload)
            raise ProcessCrashed(f"the load stream's client failed: {message}\n{trace}")
        return payload

    def segment(self, url: str, spec: WorkloadSpec, warmup_s: float, measure_s: float) -> Segment:
        """Closed-loop load at ``spec.concurrency``: a warm-up of ``warmup_s`` that lasts until every request sent in
        it has completed, then ``measure_s`` of load, then the drain. Raises ``LoadError`` when any request failed,
        ``MeasurementError`` when the segment outruns its deadline: the bodies' build, the warm-up and the measured
        span, and a request's connect and request timeouts twice (the warm-up's last requests, then the drain's), by
        which every request has ended on its own."""
        self._require("segment")
        assert self._child is not None
        if not (warmup_s >= 0 and measure_s > 0):
            raise ConfigError(f"segment warmup {warmup_s} s, measured {measure_s} s: need >= 0 and > 0")
        endpoint = endpoint_url(url)
        proc = self._child.proc
        if proc.poll() is not None:
            raise ProcessCrashed(f"the load stream's client exited (code {proc.returncode}): {self._tail()}")
        assert proc.stdin is not None
        assert proc.stdout is not None
        order = pickle.dumps(SegmentOrder(endpoint, spec, warmup_s, measure_s))
        proc.stdin.write(frame(b"S", order))
        proc.stdin.flush()
        while self._pending:
            self._answer(self.build_s, "body build", "image encoding this slow, or the client stuck")
            self._pending -= 1
        life_s = spec.connect_timeout_s + spec.request_timeout_s  # the longest any request can take
        deadline_s = self.build_s + warmup_s + measure_s + 2 * life_s  # the first order also builds bodies
        why = (f"{self.build_s:g} s for the bodies, the warm-up's {warmup_s:g} s and up to {life_s:g} s more for the "
               f"requests sent in it to complete, {measure_s:g} s measured and up to {life_s:g} s of drain: every "
               "request ends by its own connect and request timeouts by then, so the client itself is stuck "
               "(stopped, or starved of CPU)")
        payload = self._answer(deadline_s, f"segment against {endpoint}", why)
        raw: RawRun = pickle.loads(payload)
        self.segments += 1
        return _segment(endpoint, spec, raw, warmup_s)


def _segment(url: str, spec: WorkloadSpec, raw: RawRun, warmup_s: float) -> Segment:
    start = raw.origin
    # The stream's driver sets both before it can end.
    assert raw.measure_at is not None
    assert raw.stop_at is not None
    failed = tuple(r.error for r in raw.records if r.error is not None)
    if failed:
        kinds = sorted({e.kind for e in failed})
        shown = "\n  ".join(str(e) for e in failed[:5])
        raise LoadError(f"{len(failed)} of {len(raw.records)} requests to {url} failed ({', '.join(kinds)}); the "
                        f"warm-up ended {raw.measure_at - start:.2f} s in, once every request sent in its first "
                        f"{warmup_s:g} s had ended; first:\n  {shown}", failed)
    end = start + max((r.end_s for r in raw.records), default=raw.wall_s)
    return Segment(url, spec, start, raw.measure_at, raw.stop_at, end, raw.records, raw.loop_lag_s, raw.cpu_s)

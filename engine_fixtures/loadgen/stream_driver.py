"""A time-bounded closed loop for the long-lived load client (``loadgen.stream``): the ``fast`` client's driver,
cycling over a pool of pre-built bodies until a stop time instead of sending a fixed list once.

Every slot sends its next request as soon as its previous one finished. The driver decides, event by event (at each
send and completion, no timer and no polling), where its segment's measured span lies:

- the warm-up lasts at least until ``warm_until`` (the segment's clock origin + its ``warmup_s``) and then until every
  warm-up request has completed (whatever its outcome: a failed or timed-out request completes too). A warm-up
  request is one sent before ``warm_until`` or one of the first wave (the first ``concurrency`` sends, which go out
  together into an idle engine), so even a nominal warm-up of 0 s lasts until the first wave has completed: what a
  live arm's visit uses after its switch (``scenarios.runner``). It ends at ``measure_at = max(warm_until, the
  latest completion among those requests + WARMUP_EPSILON_S)`` (``warmup_end``, the one implementation of this
  rule): a warm-up request never completes inside a measured window (``loadgen.stream.finished_in`` counts
  ``lo <= end < hi``). The rule is per request, not per wave: at any concurrency, lockstep or not;
- sending stops at ``stop_at = measure_at + measure_s``, so the measured span keeps its full length however long the
  warm-up took; until the warm-up has ended the stop time is open (``None``). Then no new request is sent and the run
  ends when the requests in flight have finished (the drain).

Requests that never complete cannot hold the warm-up open for ever: each one ends by its own timeouts (connect and
request, ``fast_http``), and the parent bounds the whole segment with a deadline that allows for that once in the
warm-up and once in the drain (``LoadStream.segment``).

Rows keep a running request number, so records from one segment are distinct even though bodies repeat (the
engine's multimodal caches are off: a repeated body crosses the feature transport like a fresh one).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from engine_fixtures.loadgen.fast_client import FastDriver
from engine_fixtures.loadgen.fast_http import FastConnection, Row
from engine_fixtures.loadgen.workload import WorkloadSpec

# After the warm-up's last completion, so that it falls before the first window (``lo <= end``) also as stored: 1 ms
# is ten times the 0.1 ms resolution ``scenarios.segment.window_requests`` keeps times at, and nothing against a
# window of seconds.
WARMUP_EPSILON_S = 1e-3


def warmup_end(warm_until: float, last_warmup_completion: float) -> float:
    """``measure_at``: ``warm_until`` or just after the latest completion of a request sent before it, if later."""
    return max(warm_until, last_warmup_completion + WARMUP_EPSILON_S)


class StreamDriver(FastDriver):
    """``FastDriver`` whose closed loop cycles over ``bodies``, warms up until ``warm_until`` and until the requests
    sent before it and the first wave have completed, then sends for ``measure_s`` more (the module docstring).
    ``measure_at`` and ``stop_at`` (``perf_counter`` seconds) are None until the warm-up has ended."""

    def __init__(self, url: str, spec: WorkloadSpec, bodies: Sequence[bytes], warm_until: float,
                 measure_s: float) -> None:
        super().__init__(url, spec, bodies)
        if spec.concurrency is None:
            raise ValueError("the load stream runs closed loops only (set WorkloadSpec.concurrency)")
        self.warm_until = warm_until
        self.measure_s = measure_s
        self.measure_at: float | None = None
        self.stop_at: float | None = None
        self.in_flight = 0
        self.first_wave = spec.concurrency  # the first sends, all at the start: warm-up requests whatever warm_until
        self.warm_in_flight = 0  # warm-up requests (``_warm``) not yet completed
        self.warm_last_end = -math.inf  # the latest completion among them
        # FastDriver indexes heads and bodies by the request number; here they cycle over the pool.
        self.heads, self.bodies = _Cycle(self.heads), _Cycle(bodies)  # type: ignore[assignment]

    def _next(self, conn: FastConnection | None, freed: float) -> None:
        now = time.perf_counter()
        if (self.stop_at is None and self.warm_in_flight == 0 and now >= self.warm_until
                and self.next_index >= self.first_wave):
            # No warm-up request is left, and none can be sent any more: the warm-up is over.
            self.measure_at = warmup_end(self.warm_until, self.warm_last_end)
            self.stop_at = self.measure_at + self.measure_s
        if self.stop_at is not None and now >= self.stop_at:
            if not self.exhausted:
                self.exhausted.append(now)
            if self.in_flight == 0 and not self.done.done():
                self.done.set_result(None)
            return
        index = self.next_index
        self.next_index = index + 1
        self.in_flight += 1
        if self._warm(index, now):
            self.warm_in_flight += 1
        self._start(conn, index, freed, now)  # sent at ``now``: the time its row carries and the rule compares

    def _warm(self, index: int, sent: float) -> bool:
        """Whether request ``index``, sent at ``sent``, belongs to the warm-up (the module docstring's rule)."""
        return sent < self.warm_until or index < self.first_wave

    def _on_done(self, conn: FastConnection | None, row: Row) -> None:
        try:
            self.rows.append(row)
            self.counter.value += 1
            self.in_flight -= 1
            if self._warm(row[0], row[2]):
                self.warm_in_flight -= 1
                self.warm_last_end = max(self.warm_last_end, row[3])
            if conn is not None and not conn.alive:
                self.conns.discard(conn)
                conn = None
            self._next(conn, row[3])
        except BaseException as exc:  # a bug here must end the run with its traceback, not hang it
            if not self.done.done():
                self.done.set_exception(exc)
            raise


class _Cycle:
    """``seq[i]`` for any ``i``: ``seq[i % len(seq)]``."""

    def __init__(self, seq: Sequence[Any]) -> None:
        self.seq = seq

    def __getitem__(self, i: int) -> Any:
        return self.seq[i % len(self.seq)]

    def __len__(self) -> int:
        return len(self.seq)

"""A time-bounded closed loop for the long-lived load client (``loadgen.stream``): the ``fast`` client's driver,
cycling over a pool of pre-built bodies until a stop time instead of sending a fixed list once.

Every slot sends its next request as soon as its previous one finished, until ``stop_at`` (``perf_counter``
seconds); then no new request is sent and the run ends when the requests in flight have finished (the drain).
Rows keep a running request number, so records from one segment are distinct even though bodies repeat (the
engine's multimodal caches are off: a repeated body crosses the feature transport like a fresh one).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from engine_fixtures.loadgen.fast_client import FastDriver
from engine_fixtures.loadgen.fast_http import FastConnection, Row
from engine_fixtures.loadgen.workload import WorkloadSpec


class StreamDriver(FastDriver):
    """``FastDriver`` whose closed loop runs until ``stop_at`` over ``bodies`` in a cycle."""

    def __init__(self, url: str, spec: WorkloadSpec, bodies: Sequence[bytes], stop_at: float) -> None:
        super().__init__(url, spec, bodies)
        if spec.concurrency is None:
            raise ValueError("the load stream runs closed loops only (set WorkloadSpec.concurrency)")
        self.stop_at = stop_at
        self.in_flight = 0
        # FastDriver indexes heads and bodies by the request number; here they cycle over the pool.
        self.heads, self.bodies = _Cycle(self.heads), _Cycle(bodies)  # type: ignore[assignment]

    def _next(self, conn: FastConnection | None, freed: float) -> None:
        if time.perf_counter() >= self.stop_at:
            if not self.exhausted:
                self.exhausted.append(time.perf_counter())
            if self.in_flight == 0 and not self.done.done():
                self.done.set_result(None)
            return
        index = self.next_index
        self.next_index = index + 1
        self.in_flight += 1
        self._start(conn, index, freed)

    def _on_done(self, conn: FastConnection | None, row: Row) -> None:
        try:
            self.rows.append(row)
            self.counter.value += 1
            self.in_flight -= 1
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

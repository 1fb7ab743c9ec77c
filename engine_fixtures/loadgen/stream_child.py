"""The long-lived load process: ``python -m engine_fixtures.loadgen.stream_child``.

Reads framed commands from stdin, one at a time, and answers each on stdout (frames as in ``loadgen.child``: a
kind byte and an 8-byte length):

- ``S`` + pickled ``SegmentOrder``: run one closed-loop segment against ``order.url``: a warm-up of
  ``order.warmup_s`` that lasts until every request sent in it has completed, then ``order.measure_s`` of load,
  then the drain (``stream_driver``, which decides where the warm-up ends and sending stops); answer ``R`` + pickled
  ``RawRun`` (record times relative to ``RawRun.origin``, a ``perf_counter`` = CLOCK_MONOTONIC value, with the
  driver's ``measure_at`` and ``stop_at``) or ``E`` + pickled ``(message, traceback)``.
- ``B`` + pickled ``WorkloadSpec``: build that workload's bodies now (sent while an engine starts, so the first
  segment does not wait for the image encoding); answer ``R`` + pickled ``None``.
- ``Q`` (or end of input): exit.

Request bodies (the images encoded, the JSON serialised) are built once per distinct workload and kept for the
life of the process: a later segment of the same workload starts at once.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import sys
import time
import traceback
from dataclasses import dataclass, replace

from engine_fixtures.loadgen.child import frame
from engine_fixtures.loadgen.workload import WorkloadSpec

POOL_BODIES = 128  # distinct bodies per workload; closed loops cycle over them


@dataclass(frozen=True)
class SegmentOrder:
    url: str  # the chat completions endpoint
    spec: WorkloadSpec  # concurrency, images, text and output length (num_requests is ignored)
    warmup_s: float  # the nominal warm-up; it lasts until the requests sent in it have completed
    measure_s: float  # then this long of load, after which no request is sent; the drain follows


def _read_exact(fd: int, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return bytes(buf)
        buf += chunk
    return bytes(buf)


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def pool_spec(spec: WorkloadSpec) -> WorkloadSpec:
    """The workload whose bodies make the pool (what the bodies depend on, with ``POOL_BODIES`` of them)."""
    return replace(spec, num_requests=POOL_BODIES, warmup_requests=0, concurrency=min(spec.concurrency or 1,
                                                                                      POOL_BODIES),
                   request_rate=None)


class BodyCache:
    def __init__(self) -> None:
        self._bodies: dict[WorkloadSpec, list[bytes]] = {}

    def get(self, spec: WorkloadSpec) -> list[bytes]:
        from engine_fixtures.loadgen.payload import build_bodies

        key = pool_spec(spec)
        if key not in self._bodies:
            self._bodies[key] = build_bodies(key)
        return self._bodies[key]


def run_segment(order: SegmentOrder, cache: BodyCache) -> object:
    from engine_fixtures.loadgen.client import RawRun, run_client
    from engine_fixtures.loadgen.stream_driver import StreamDriver

    bodies = cache.get(order.spec)
    spec = replace(order.spec, warmup_requests=0)  # the warm-up is a time span here, decided by the driver

    async def run() -> RawRun:
        origin = time.perf_counter()  # the records' clock origin, and the one the warm-up counts from
        driver = StreamDriver(order.url, spec, bodies, origin + order.warmup_s, order.measure_s)
        raw = await run_client(order.url, spec, bodies, driver=driver, origin=origin)
        return replace(raw, measure_at=driver.measure_at, stop_at=driver.stop_at)

    try:
        import uvloop
    except ImportError:  # Linux-only; the stock loop is slower but correct
        return asyncio.run(run())
    return uvloop.run(run())


def main() -> None:
    inp, out = sys.stdin.fileno(), sys.stdout.fileno()
    cache = BodyCache()
    while True:
        head = _read_exact(inp, 9)
        if len(head) < 9 or head[:1] == b"Q":
            return
        payload = _read_exact(inp, int.from_bytes(head[1:], "little"))
        try:
            order = pickle.loads(payload)
            if head[:1] == b"S":
                raw = run_segment(order, cache)
            else:  # "B": build the bodies only
                cache.get(order)
                raw = None
            _write(out, frame(b"R", pickle.dumps(raw, protocol=pickle.HIGHEST_PROTOCOL)))
        except BaseException as exc:
            _write(out, frame(b"E", pickle.dumps((f"{type(exc).__name__}: {exc}", traceback.format_exc()))))
            if not isinstance(exc, Exception):
                raise


if __name__ == "__main__":
    main()

"""The load process: ``python -m engine_fixtures.loadgen.child``. Reads a pickled ``(url, spec, cpus,
progress)`` from stdin, pins itself, builds every body before the clock, runs the client, and writes
framed messages to stdout: ``P`` + count (progress, at most every ``PROGRESS_S``), then ``R`` + pickled
``RawRun`` or ``E`` + pickled ``(message, traceback)``. Each frame: 1 kind byte, 8-byte length/count."""

from __future__ import annotations

import asyncio
import os
import pickle
import sys
import traceback
from typing import Any

PROGRESS_S = 0.25


def frame(kind: bytes, payload: bytes = b"", count: int | None = None) -> bytes:
    size = count if count is not None else len(payload)
    return kind + size.to_bytes(8, "little") + payload


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class _Counter:
    value = 0


def main() -> None:
    out = sys.stdout.fileno()
    try:
        url, spec, cpus, progress = pickle.loads(sys.stdin.buffer.read())
        if cpus is not None:
            os.sched_setaffinity(0, cpus)
        from engine_fixtures.loadgen.client import run_client
        from engine_fixtures.loadgen.payload import build_bodies

        bodies = build_bodies(spec)
        counter = _Counter()

        async def run() -> Any:
            if progress:
                loop = asyncio.get_running_loop()

                def report() -> None:
                    _write(out, frame(b"P", count=counter.value))
                    handle[0] = loop.call_later(PROGRESS_S, report)

                handle = [loop.call_later(PROGRESS_S, report)]
            try:
                return await run_client(url, spec, bodies, counter)
            finally:
                if progress:
                    handle[0].cancel()

        try:
            import uvloop
        except ImportError:  # Linux-only; the stock loop is slower but correct
            raw = asyncio.run(run())
        else:
            raw = uvloop.run(run())
        _write(out, frame(b"R", pickle.dumps(raw, protocol=pickle.HIGHEST_PROTOCOL)))
    except BaseException as exc:
        _write(out, frame(b"E", pickle.dumps((f"{type(exc).__name__}: {exc}", traceback.format_exc()))))


if __name__ == "__main__":
    main()

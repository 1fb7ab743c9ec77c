"""A working process tree titled like SGLang's, for the profiler's self-tests (real processes, real py-spy).

The root (untitled, like SGLang's HTTP server) starts two spawn children titled ``sglang::scheduler_TP0`` and
``sglang::detokenizer`` and passes every request through them: root -> scheduler (``schedule_batch``: CPU work,
plus ``inject.spin(--spin-ms)`` when asked, the known slowdown a differential must name) -> detokenizer
(``detokenize``: a little CPU work) -> root. It prints ``ready`` once both children answer, then serves stdin
lines: a number of seconds to run requests back to back, answered with the requests completed; EOF stops it.

    python -m perf_tests.support.work_tree [--spin-ms MS] [--work-ms MS]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import time

from engine_fixtures.inject import spin


def busy(ms: float) -> int:
    """CPU work for about ``ms`` ms (arithmetic, not a spin on the clock alone)."""
    end, x = time.perf_counter() + ms / 1000.0, 0
    while time.perf_counter() < end:
        x = sum(i * i for i in range(200)) + x % 7
    return x


def schedule_batch(work_ms: float, spin_ms: float) -> int:
    out = busy(work_ms)
    spin(spin_ms)
    return out


def detokenize(work_ms: float) -> int:
    return busy(work_ms / 4)


def _serve(title: str, conn_in, conn_out, work) -> None:  # type: ignore[no-untyped-def]
    """One SGLang-titled role: announce itself, then do ``work()`` per request id and pass the id on."""
    import setproctitle

    setproctitle.setproctitle(title)
    conn_out.send("up")
    while True:
        try:
            rid = conn_in.recv()
        except EOFError:
            return
        if rid == "up":  # the upstream role's announcement, not a request
            continue
        work()
        conn_out.send(rid)


def scheduler(conn_in, conn_out, work_ms: float, spin_ms: float) -> None:  # type: ignore[no-untyped-def]
    _serve("sglang::scheduler_TP0", conn_in, conn_out, lambda: schedule_batch(work_ms, spin_ms))


def detokenizer(conn_in, conn_out, work_ms: float) -> None:  # type: ignore[no-untyped-def]
    _serve("sglang::detokenizer", conn_in, conn_out, lambda: detokenize(work_ms))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spin-ms", type=float, default=0.0)
    ap.add_argument("--work-ms", type=float, default=2.0)
    a = ap.parse_args()
    ctx = mp.get_context("spawn")
    to_sched_r, to_sched_w = ctx.Pipe(duplex=False)
    to_detok_r, to_detok_w = ctx.Pipe(duplex=False)
    back_r, back_w = ctx.Pipe(duplex=False)
    procs = [ctx.Process(target=scheduler, args=(to_sched_r, to_detok_w, a.work_ms, a.spin_ms), daemon=True),
             ctx.Process(target=detokenizer, args=(to_detok_r, back_w, a.work_ms), daemon=True)]
    for p in procs:
        p.start()
    if not back_r.poll(120):  # the detokenizer's "up" (the scheduler's goes through it)
        raise SystemExit("work tree children did not start within 120 s")
    back_r.recv()
    print("ready", flush=True)
    rid = 0
    for line in sys.stdin:
        end, done = time.monotonic() + float(line), 0
        while time.monotonic() < end:
            rid += 1
            to_sched_w.send(rid)
            if not back_r.poll(60):
                raise SystemExit("work tree request got no answer within 60 s")
            back_r.recv()
            done += 1
        print(done, flush=True)


if __name__ == "__main__":
    main()

"""py-spy's overhead on the CPU tier, measured in one run: one arm's throughput with and without py-spy attached.

    python -m engine_fixtures.profile.overhead [--copy buffer] [--rounds 12] [--requests 48] [--rate 100]

One cpu_tier rig (the arm under its 0.5-core quota, as the CPU tier runs it) serves windows of ``--requests``
requests; the windows alternate A B B A (A: no profiler, B: py-spy recording the producer and the consumer at
``--rate``, as ``--perf-profile`` does), after one unrecorded warmup window. Each round's ratio B/A of
requests per second is the overhead's sample; it prints the per-round ratios, their median and a 95 % interval
(t on the log ratios), and a Markdown line for docs/results/profile-overhead.md. A ratio, never an absolute
speed, and both sides in the same run, so the machine's speed today cancels. It holds the machine lock (like every
measuring pytest run) while it measures.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from contextlib import ExitStack
from pathlib import Path

from scipy import stats

from engine_fixtures.cpu_tier.arms import CpuTierArm
from engine_fixtures.cpu_tier.rig import Rig
from engine_fixtures.isolation import owner, run_registry
from engine_fixtures.isolation.machine_lock import MachineLock
from engine_fixtures.profile import record


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copy", default="buffer")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--requests", type=int, default=48)
    ap.add_argument("--rate", type=float, default=100.0)
    a = ap.parse_args(argv)
    arm = CpuTierArm(copy=a.copy, threads="cpus", quota=0.5, resolution=1024, concurrency=4)
    plain: list[float] = []
    spied: list[float] = []
    samples: list[int] = []
    lock = MachineLock(run_registry.state_dir(run_registry.default_state_dir()) / "lock")
    lock.acquire(1800.0, lambda holder, _timeout_s: print(f"waiting for the machine lock held by {holder}", flush=True))
    with owner.temp_dir("overhead") as tmp, ExitStack() as stack:
        stack.callback(lock.release)
        rig = Rig.start(arm, stack, tmp, 0, "overhead")
        rig.window(a.requests)  # warmup: a fresh rig's first window runs slow

        def spied_window(i: int) -> float:
            out: list[float] = []

            def drive(_s: float) -> int:
                out.append(rig.window(a.requests)["requests_per_s"])
                return a.requests

            prof = record.record({"producer": tuple(rig.quota.pids()), "consumer": (rig.consumer.pid,)}, drive,
                                 rate_hz=a.rate, seconds=60.0, workdir=Path(tmp, f"w{i}"))
            if prof.notes:
                raise SystemExit(f"py-spy did not attach, so nothing was measured: {prof.notes[0]}")
            samples.append(prof.profiles["producer"].samples)
            return out[0]

        for i in range(a.rounds):
            order = ("A", "B") if i % 2 == 0 else ("B", "A")
            for side in order:
                if side == "A":
                    plain.append(rig.window(a.requests)["requests_per_s"])
                else:
                    spied.append(spied_window(i))
    logs = [math.log(s / p) for s, p in zip(spied, plain, strict=True)]
    m, se = statistics.mean(logs), statistics.stdev(logs) / math.sqrt(len(logs))
    t = stats.t.ppf(0.975, len(logs) - 1)
    out = {"arm": arm.id, "rounds": a.rounds, "requests_per_window": a.requests, "rate_hz": a.rate,
           "plain_req_s": plain, "spied_req_s": spied, "ratios": [math.exp(x) for x in logs],
           "ratio_median": math.exp(statistics.median(logs)), "ratio_mean": math.exp(m),
           "ci95": [math.exp(m - t * se), math.exp(m + t * se)], "producer_samples_per_window": samples}
    print(json.dumps(out, indent=1))
    print(f"| {arm.id} | {a.rate:g} Hz | {a.rounds} ABBA rounds of {a.requests} requests | "
          f"{statistics.median(plain):.2f} | {statistics.median(spied):.2f} | {out['ratio_mean']:.3f} "
          f"({out['ci95'][0]:.3f}-{out['ci95'][1]:.3f}) |")
    return out


if __name__ == "__main__":
    main()

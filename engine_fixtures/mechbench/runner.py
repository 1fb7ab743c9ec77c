"""Driver of the mechanism benchmark: one producer (inside its CpuQuota) + one consumer per arm, windows
interleaved across arms (A B A B), metrics per window, nothing leaked (processes, segments, cgroups).

``run_arms(arms, repeats, warmup, requests)`` -> one ``RunResult`` per arm; ``run_arm`` for one arm.
Zero completed requests in a window raises ``MeasurementError``.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import secrets
import select
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass

import numpy as np
import psutil

from engine_fixtures.baselines.results import RunResult
from engine_fixtures.cgroups import CpuQuota
from engine_fixtures.errors import LeakError, MeasurementError, ProcessCrashed, ProcessStartError
from engine_fixtures.mechbench import consumer
from engine_fixtures.mechbench.arms import MechArm, pixel_shape
from engine_fixtures.mechbench.producer import MECH_PREFIX
from engine_fixtures.transport.shm import list_segments, sweep_stale


def _readline(proc: subprocess.Popen, deadline_s: float) -> dict:
    ready, _, _ = select.select([proc.stdout], [], [], deadline_s)
    line = proc.stdout.readline() if ready else ""
    if not line:
        raise ProcessCrashed(f"mechbench producer pid {proc.pid} gave no reply within {deadline_s} s "
                             f"(exit code {proc.poll()}); see its stderr above")
    return json.loads(line)


@dataclass
class Rig:
    arm: MechArm
    quota: CpuQuota
    producer: subprocess.Popen
    consumer: mp.process.BaseProcess

    @classmethod
    def start(cls, arm: MechArm, stack: ExitStack, tmp: str, seed: int) -> Rig:
        quota = stack.enter_context(CpuQuota(arm.quota, name="perf-mech"))
        authkey = secrets.token_bytes(16)
        address = os.path.join(tmp, f"c{seed}.sock")
        cons = mp.get_context("spawn").Process(target=consumer.serve, args=(address, authkey), daemon=True)
        cons.start()
        stack.callback(_stop_process, cons)
        spec = {"copy": arm.copy, "threads": arm.thread_count(), "resolution": arm.resolution,
                "concurrency": arm.concurrency, "address": address, "authkey": authkey.hex(), "seed": seed}
        env = dict(os.environ)
        if arm.wait_policy == "passive":
            env["OMP_WAIT_POLICY"] = "PASSIVE"
        deadline = time.monotonic() + 60
        while not os.path.exists(address):  # the listener binds right after the spawn import
            if not cons.is_alive() or time.monotonic() > deadline:
                raise ProcessStartError(f"mechbench consumer did not listen on {address} (exit {cons.exitcode})")
            cons.join(timeout=0.05)
        proc = subprocess.Popen([sys.executable, "-m", "engine_fixtures.mechbench.producer", json.dumps(spec)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                                preexec_fn=quota.preexec_fn())
        stack.callback(_stop_popen, proc)
        ready = _readline(proc, 120)
        if not ready.get("ready"):
            raise ProcessStartError(f"mechbench producer did not start: {ready}")
        return cls(arm, quota, proc, cons)

    def window(self, requests: int) -> dict[str, float]:
        ps = psutil.Process(self.producer.pid)
        cpu0, stat0 = ps.cpu_times(), self.quota.stat()
        self.producer.stdin.write(json.dumps({"window": requests}) + "\n")
        self.producer.stdin.flush()
        out = _readline(self.producer, 600)
        cpu1, stat1 = ps.cpu_times(), self.quota.stat()
        lat = out["latencies_ms"]
        if not lat:
            raise MeasurementError(f"{self.arm.id}: zero completed requests in a window "
                                   f"({out['n_errors']} errors, e.g. {out['errors']})")
        if out["n_errors"]:
            raise MeasurementError(f"{self.arm.id}: {out['n_errors']} failed requests, e.g. {out['errors']}")
        cores = (cpu1.user + cpu1.system - cpu0.user - cpu0.system) / out["wall_s"]
        d = stat1 - stat0
        m = {"requests_per_s": len(lat) / out["wall_s"], "latency_p50_ms": float(np.percentile(lat, 50)),
             "latency_p99_ms": float(np.percentile(lat, 99)), "producer_cpu_cores": cores,
             "throttled_periods": float(d.nr_throttled),
             "throttled_ratio": d.nr_throttled / d.nr_periods if d.nr_periods else 0.0}
        if self.arm.quota is not None:
            m["producer_share_of_quota"] = cores / self.arm.quota
        return m


def _stop_popen(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            proc.stdin.write(json.dumps({"stop": True}) + "\n")
            proc.stdin.flush()
            proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait(timeout=30)
    for f in (proc.stdin, proc.stdout):
        if f is not None:
            f.close()


def _stop_process(proc: mp.process.BaseProcess) -> None:
    proc.join(timeout=30)
    if proc.is_alive():
        proc.kill()
        proc.join(timeout=30)


def run_arms(arms: list[MechArm], repeats: int, warmup: int = 1, requests: int = 24) -> list[RunResult]:
    """Measure ``arms`` interleaved: for each of warmup+repeats rounds, one window per arm."""
    before = list_segments(MECH_PREFIX)
    windows: list[list[dict[str, float]]] = [[] for _ in arms]
    meta: list[dict] = []
    try:
        with tempfile.TemporaryDirectory(prefix="perf-mech-") as tmp, ExitStack() as stack:
            rigs = [Rig.start(a, stack, tmp, i) for i, a in enumerate(arms)]
            meta = [{"threads_applied": a.thread_count(), "quota_cores": a.quota, "cgroup_version": r.quota.version,
                     "pixel_values_shape": list(pixel_shape(a.resolution)), "requests_per_window": requests,
                     "visible_cpus": len(os.sched_getaffinity(0))} for a, r in zip(arms, rigs, strict=True)]
            for rnd in range(warmup + repeats):
                order = range(len(rigs)) if rnd % 2 == 0 else reversed(range(len(rigs)))
                for i in order:
                    windows[i].append(rigs[i].window(requests))
    finally:
        leaked = list_segments(MECH_PREFIX) - before
        sweep_stale(MECH_PREFIX)
    if leaked:
        raise LeakError(f"mechbench left /dev/shm segments {sorted(leaked)}; they were swept")
    results = []
    for arm, ws, md in zip(arms, windows, meta, strict=True):
        names = ws[0].keys()
        results.append(RunResult(arm.scenario, arm.axes,
                                 samples={n: tuple(w[n] for w in ws[warmup:]) for n in names},
                                 warmup={n: tuple(w[n] for w in ws[:warmup]) for n in names}, metadata=md))
    return results


def run_arm(arm: MechArm, repeats: int, warmup: int = 1, requests: int = 24) -> RunResult:
    return run_arms([arm], repeats, warmup, requests)[0]

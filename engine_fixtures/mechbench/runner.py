"""Driver of the mechanism benchmark: one ``Rig`` per arm, windows interleaved across arms (A B, B A, ...),
one ``RunResult`` per arm, nothing leaked.

``run_arms(arms, repeats, warmup, requests)`` -> one ``RunResult`` per arm (``run_arm`` for one arm).
Every round runs one window per arm; the order alternates each round so drift hits all arms alike.
Errors: ``MeasurementError`` (zero completed or failed requests), ``ProcessCrashed`` (with the log
tails), ``LeakError`` after teardown if a ``perf_mech_`` /dev/shm segment, a POSIX semaphore that one of
the rig's processes had mapped, or one of its processes outlived the run (segments are swept first,
so a failing run never leaves them behind). The quota cgroups are removed by ``CpuQuota``.
"""

from __future__ import annotations

import tempfile
from contextlib import ExitStack

import psutil

from engine_fixtures.baselines.results import RunResult
from engine_fixtures.errors import ConfigError, LeakError
from engine_fixtures.mechbench.arms import MechArm, pixel_shape, visible_cpus
from engine_fixtures.mechbench.producer import MECH_PREFIX
from engine_fixtures.mechbench.rig import Rig, semaphore_files
from engine_fixtures.transport.shm import list_segments, sweep_stale


def _leftovers(rigs: list[Rig], before: frozenset[str]) -> list[str]:
    found = [f"/dev/shm segments {sorted(s)}" for s in [list_segments(MECH_PREFIX) - before] if s]
    sems = semaphore_files({i for r in rigs for i in r.semaphores})
    if sems:
        found.append(f"semaphores {sems}")
    alive = [p.pid for r in rigs for p in (r.producer, r.consumer) if psutil.pid_exists(p.pid)
             and psutil.Process(p.pid).status() != psutil.STATUS_ZOMBIE]
    if alive:
        found.append(f"processes {alive}")
    return found


def run_arms(arms: list[MechArm], repeats: int, warmup: int = 1, requests: int = 12) -> list[RunResult]:
    """Measure ``arms`` interleaved: ``warmup`` + ``repeats`` rounds of one window per arm."""
    if not arms or repeats < 1 or warmup < 0 or requests < 1:
        raise ConfigError(f"run_arms needs arms, repeats >= 1, warmup >= 0, requests >= 1; got {len(arms)} "
                          f"arms, repeats={repeats}, warmup={warmup}, requests={requests}")
    if len(set(arms)) != len(arms):
        raise ConfigError("run_arms got the same arm twice; pass each arm once")
    before = list_segments(MECH_PREFIX)
    windows: list[list[dict[str, float]]] = [[] for _ in arms]
    rigs: list[Rig] = []
    try:
        with tempfile.TemporaryDirectory(prefix="perf-mech-") as tmp, ExitStack() as stack:
            for i, arm in enumerate(arms):
                rigs.append(Rig.start(arm, stack, tmp, i))
            for rnd in range(warmup + repeats):
                order = range(len(rigs)) if rnd % 2 == 0 else reversed(range(len(rigs)))
                for i in order:
                    windows[i].append(rigs[i].window(requests))
    finally:
        leftovers = _leftovers(rigs, before)
        sweep_stale(MECH_PREFIX)
    if leftovers:
        raise LeakError(f"mechbench left {'; '.join(leftovers)} behind (segments were swept); a rig process "
                        "was not stopped or a multiprocessing primitive was not released")
    results = []
    for arm, ws in zip(arms, windows, strict=True):
        names = ws[0].keys()
        meta = {"threads_applied": arm.thread_count(), "quota_cores": arm.quota,
                "cgroup_version": rigs[0].quota.version, "pixel_values_shape": list(pixel_shape(arm.resolution)),
                "requests_per_window": requests, "visible_cpus": visible_cpus(), "warmup_windows": warmup,
                "interleaved_with": [a.id for a in arms if a != arm]}
        results.append(RunResult(arm.scenario, arm.axes,
                                 samples={n: tuple(w[n] for w in ws[warmup:]) for n in names},
                                 warmup={n: tuple(w[n] for w in ws[:warmup]) for n in names}, metadata=meta))
    return results


def run_arm(arm: MechArm, repeats: int, warmup: int = 1, requests: int = 12) -> RunResult:
    return run_arms([arm], repeats, warmup, requests)[0]

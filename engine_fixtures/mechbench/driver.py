"""Driver of the mechanism benchmark: one ``Rig`` per arm, windows interleaved across arms (A B, B A, ...),
one ``RunResult`` per arm, nothing leaked.

``run_arms(arms, repeats, warmup, requests)`` -> one ``RunResult`` per arm (``run_arm`` for one arm).
Every round runs one window per arm; the order alternates each round so drift hits all arms alike.
Errors: ``MeasurementError`` (zero completed or failed requests), ``ProcessCrashed`` (with the log
tails), ``LeakError`` after teardown if a descendant process, a ``perf-mech-<pid>-*`` cgroup, a
``perf_mech_`` /dev/shm segment or a POSIX semaphore that one of the rig's processes had mapped outlived
the run (``leaks.LeakSnapshot``, narrowed to this run). Leaks are removed on every path, so a failing run
never leaves them behind; when the run itself raised, that error wins.
"""

from __future__ import annotations

import os
import tempfile
from contextlib import ExitStack
from statistics import median

from engine_fixtures.errors import ConfigError, LeakError
from engine_fixtures.isolation.cgroups import PREFIX
from engine_fixtures.isolation.leaks import Leaks, LeakSnapshot, semaphore_files
from engine_fixtures.mechbench.arms import MechArm, pixel_shape, visible_cpus
from engine_fixtures.mechbench.producer import MECH_PREFIX
from engine_fixtures.mechbench.rig import Rig
from engine_fixtures.store.results import RunResult

CGROUP_NAME = f"mech-{os.getpid()}"  # cgroups perf-mech-<pid>-<uuid>: this process's own


def _own_leaks(before: LeakSnapshot, rigs: list[Rig]) -> Leaks:
    """``leaks.LeakSnapshot``'s view, narrowed to what this run can have made: its descendants, its own
    ``perf-mech-<pid>-*`` cgroups, ``perf_mech_`` segments and the semaphores its processes mapped
    (other suites on a shared box create /dev/shm entries concurrently; those are not ours to judge)."""
    found = before.new_since(LeakSnapshot.take(before.cgroup_prefix))
    sems = set(semaphore_files({i for r in rigs for i in r.semaphores}))
    return Leaks(shm=tuple(n for n in found.shm if n.startswith(MECH_PREFIX) or n in sems),
                 processes=found.processes, cgroups=found.cgroups)


def run_arms(arms: list[MechArm], repeats: int, warmup: int = 1, requests: int = 12) -> list[RunResult]:
    """Measure ``arms`` interleaved: ``warmup`` + ``repeats`` rounds of one window per arm."""
    if not arms or repeats < 1 or warmup < 0 or requests < 1:
        raise ConfigError(f"run_arms needs arms, repeats >= 1, warmup >= 0, requests >= 1; got {len(arms)} "
                          f"arms, repeats={repeats}, warmup={warmup}, requests={requests}")
    if len(set(arms)) != len(arms):
        raise ConfigError("run_arms got the same arm twice; pass each arm once")
    before = LeakSnapshot.take(cgroup_prefix=f"{PREFIX}{CGROUP_NAME}-")
    windows: list[list[dict[str, float]]] = [[] for _ in arms]
    rigs: list[Rig] = []
    try:
        with tempfile.TemporaryDirectory(prefix="perf-mech-") as tmp, ExitStack() as stack:
            for i, arm in enumerate(arms):
                rigs.append(Rig.start(arm, stack, tmp, i, CGROUP_NAME))
            for rnd in range(warmup + repeats):
                order = range(len(rigs)) if rnd % 2 == 0 else reversed(range(len(rigs)))
                for i in order:
                    windows[i].append(rigs[i].window(requests))
    finally:
        leaks = _own_leaks(before, rigs)
        leaks.reap()
    if leaks:
        raise LeakError(f"mechbench left these behind (now removed):\n{leaks.describe()}\na rig process was "
                        "not stopped, a segment not unlinked or a multiprocessing primitive not released")
    results = []
    for arm, rig, ws in zip(arms, rigs, windows, strict=True):
        names = ws[0].keys()
        stages = rig.stage_ms[warmup:]
        meta = {"decode_ms_median": median(s[0] for s in stages), "shm_create_ms_median": median(s[1] for s in stages),
                "threads_applied": arm.thread_count(), "quota_cores": arm.quota,
                "cgroup_version": rigs[0].quota.version, "pixel_values_shape": list(pixel_shape(arm.resolution)),
                "requests_per_window": requests, "visible_cpus": visible_cpus(), "warmup_windows": warmup,
                "interleaved_with": [a.id for a in arms if a != arm]}
        results.append(RunResult(arm.scenario, arm.axes,
                                 samples={n: tuple(w[n] for w in ws[warmup:]) for n in names},
                                 warmup={n: tuple(w[n] for w in ws[:warmup]) for n in names}, metadata=meta))
    return results


def run_arm(arm: MechArm, repeats: int, warmup: int = 1, requests: int = 12) -> RunResult:
    return run_arms([arm], repeats, warmup, requests)[0]

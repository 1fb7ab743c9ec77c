"""Mechanism benchmark of the SHM copy path: every arm judged against its baseline, plus the invariant.

Smoke scale (default; CI): torch vs buffer at threads = visible CPUs, C=4, 1024 px, under a 0.5-core
quota and without one; the four arms run interleaved once per module and feed both the per-arm
``perf_record`` tests and the invariant. ``--perf-scale full``: every (threads, quota, resolution,
concurrency) pair of the grid, torch and buffer interleaved, marked slow.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from engine_fixtures.mechbench.arms import THREAD_ARMS, MechArm
from engine_fixtures.mechbench.driver import run_arms
from engine_fixtures.mechbench.grid import ratio_spread
from engine_fixtures.store.results import RunResult
from engine_fixtures.transport.shm import COPY_ARMS

QUOTA = 0.5
SMOKE_QUOTA = [MechArm(copy=c, threads="cpus", quota=QUOTA, resolution=1024, concurrency=4) for c in COPY_ARMS]
SMOKE_FREE = [MechArm(copy=c, threads="cpus", quota=None, resolution=1024, concurrency=4) for c in COPY_ARMS]
SMOKE = SMOKE_QUOTA + SMOKE_FREE
PAIRS = [(t, q, r, n) for t in THREAD_ARMS for q in (None, 0.5, 1.0) for r in (512, 1024, 2048) for n in (1, 4, 16)
         if MechArm(threads=t, quota=q, resolution=r, concurrency=n) not in SMOKE]
WARMUP = 2  # the first window after start ran up to 20% slow (page cache, allocator), inflating the CV
REQUESTS = 48  # ~3.5 s windows at quota 0.5 (35 CFS periods): the torch arm is bursty under the quota,
# and 24-request windows left its CV at 7-15% (often "unstable"); 48 brings it under the gate's 10%

pytestmark = [pytest.mark.mechanism, pytest.mark.cgroup()]


@pytest.fixture(scope="module")
def smoke_results(perf_settings) -> dict[MechArm, RunResult]:
    """The four smoke arms measured interleaved in one run (shared by the arm tests and the invariant)."""
    return dict(zip(SMOKE, run_arms(SMOKE, repeats=perf_settings.repeats, warmup=WARMUP, requests=REQUESTS),
                    strict=True))


# Without a quota the producer, the consumer and the driver share the box's 2 CPUs, so those arms' absolute
# numbers measure the scheduler more than the copy: their level moved by ~15% between otherwise identical runs
# on an idle box (buffer p50 114.8 / 131.9 / 130.6 ms) while each run's repeats agreed, which a within-run
# test reads as a regression. They are the control of the invariant below, reported and never judged alone.
CONTROL = "no quota: a control arm; on a 2-core box its level moves ~15% between runs"


@pytest.mark.perf
@pytest.mark.parametrize("arm", SMOKE, ids=lambda a: a.id)
def test_mech_arm(arm: MechArm, smoke_results, perf_record) -> None:
    if arm.quota is None and len(os.sched_getaffinity(0)) <= 2:
        perf_record.report(smoke_results[arm], CONTROL)
    else:
        perf_record(smoke_results[arm])


@pytest.mark.perf
def test_buffer_not_slower_than_torch_under_quota(smoke_results, perf_invariant, request) -> None:
    """threads = visible CPUs, quota 0.5: buffer req/s >= 0.95 x torch req/s unless the gate calls it noise."""
    torch_r, buffer_r = (smoke_results[a] for a in SMOKE_QUOTA)
    med, q1, q3 = ratio_spread(buffer_r.samples["requests_per_s"], torch_r.samples["requests_per_s"])
    free_med, free_q1, free_q3 = ratio_spread(*(smoke_results[a].samples["requests_per_s"] for a in SMOKE_FREE[::-1]))
    # user_properties, not record_property: the latter warns (an error here) under --junitxml's default format
    request.node.user_properties.append(("buffer_over_torch_quota", f"{med:.3f} [{q1:.3f}-{q3:.3f}]"))
    request.node.user_properties.append(("buffer_over_torch_no_quota", f"{free_med:.3f} [{free_q1:.3f}-{free_q3:.3f}]"))
    print(f"buffer/torch req/s per round, quota {QUOTA}: median {med:.2f}x IQR [{q1:.2f}-{q3:.2f}]; "
          f"no quota: {free_med:.2f}x [{free_q1:.2f}-{free_q3:.2f}]")
    perf_invariant("requests_per_s", torch_r, buffer_r, 0.95, label=f"buffer/torch quota={QUOTA} threads=cpus")


@pytest.mark.slow
@pytest.mark.perf
@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: f"threads={p[0]}-quota={p[1] or 'none'}-res={p[2]}-c={p[3]}")
def test_mech_pair_full(pair, perf_settings, perf_record) -> None:
    """Full grid: torch and buffer of one (threads, quota, resolution, concurrency) interleaved."""
    if perf_settings.scale != "full":
        pytest.skip("full-grid arm: run with --perf-scale full")
    t, q, r, n = pair
    arms = [MechArm(copy=c, threads=t, quota=q, resolution=r, concurrency=n) for c in COPY_ARMS]
    results = run_arms(arms, repeats=perf_settings.repeats, warmup=1, requests=max(REQUESTS, 2 * n))
    for res in results:
        print(res.scenario, "req/s median", f"{np.median(res.samples['requests_per_s']):.2f}")
    failures = []
    for res in results:  # judge both arms even if the first regresses
        try:
            perf_record(res)
        except pytest.skip.Exception as exc:
            failures.append(exc)
    if failures:
        pytest.skip(str(failures[0]))


@pytest.mark.slow
@pytest.mark.perf
@pytest.mark.parametrize("quota", [None, 0.5, 1.0], ids=lambda q: f"quota={q or 'none'}")
def test_mech_passive_wait_full(quota: float | None, perf_settings, perf_record) -> None:
    """The third fix: torch copy with OMP_WAIT_POLICY=PASSIVE, interleaved with both copy arms."""
    if perf_settings.scale != "full":
        pytest.skip("full-grid arm: run with --perf-scale full")
    arms = [MechArm(copy="torch", quota=quota, wait_policy="passive"),
            *(MechArm(copy=c, quota=quota) for c in COPY_ARMS)]
    passive, torch_r, buffer_r = run_arms(arms, repeats=perf_settings.repeats, warmup=1, requests=REQUESTS)
    for other in (torch_r, buffer_r):  # context only: those scenarios are judged by test_mech_pair_full/smoke
        med, q1, q3 = ratio_spread(passive.samples["requests_per_s"], other.samples["requests_per_s"])
        print(f"passive/{other.arm['copy']} req/s per round: {med:.2f}x [{q1:.2f}-{q3:.2f}]")
    perf_record(passive)

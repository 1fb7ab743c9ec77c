"""Mechanism benchmark of the SHM copy path: perf arms judged against baselines, plus the invariant."""

from __future__ import annotations

import statistics

import pytest
from scipy.stats import mannwhitneyu

from engine_fixtures.cgroups import probe_quota_support
from engine_fixtures.mechbench.arms import MechArm
from engine_fixtures.mechbench.runner import run_arm, run_arms

SMOKE = [MechArm(copy=c, threads="cpus", quota=0.5, resolution=1024, concurrency=4) for c in ("torch", "buffer")]
FULL = [MechArm(copy=c, threads=t, quota=q, resolution=r, concurrency=n)
        for c in ("torch", "buffer") for t in ("cpus", "64", "capped8", "1") for q in (None, 0.5, 1.0)
        for r in (512, 1024, 2048) for n in (1, 4, 16)]
ARMS = SMOKE + [pytest.param(a, marks=pytest.mark.slow, id=a.id) for a in FULL if a not in SMOKE]

pytestmark = [pytest.mark.mechanism, pytest.mark.cgroup()]


@pytest.fixture(autouse=True)
def _needs_quota() -> None:
    if (reason := probe_quota_support()) is not None:
        pytest.skip(reason)


@pytest.mark.parametrize("arm", ARMS, ids=lambda a: a.id if isinstance(a, MechArm) else None)
def test_mech_arm(arm: MechArm, perf_settings, perf_record, request) -> None:
    if arm not in SMOKE and perf_settings.scale != "full":
        pytest.skip("full-grid arm: run with --perf-scale full")
    perf_record(run_arm(arm, repeats=perf_settings.repeats, warmup=1))


def test_buffer_not_slower_than_torch_under_oversubscribed_quota(perf_settings) -> None:
    """threads = visible CPUs, quota 0.5: buffer req/s must not be significantly below torch req/s."""
    torch_r, buffer_r = run_arms(SMOKE, repeats=max(perf_settings.repeats, 5), warmup=1)
    t, b = torch_r.samples["requests_per_s"], buffer_r.samples["requests_per_s"]
    ratio = statistics.median(b) / statistics.median(t)
    p = mannwhitneyu(b, t, alternative="less").pvalue
    print(f"buffer/torch req/s median ratio {ratio:.2f} (torch {t}, buffer {b}), p(buffer slower)={p:.3f}")
    assert p >= 0.05, f"buffer arm slower than torch arm: ratio {ratio:.2f}, Mann-Whitney p={p:.3f}"

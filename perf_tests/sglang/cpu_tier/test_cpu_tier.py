"""The CPU tier's main job: SGLang's SHM copy path under a real CPU quota, judged.

Declarations only; ``scenarios.mechanism`` measures and ``judge`` decides.

Smoke scale (default; CI and ``tox -e perf-cpu``): at threads = visible CPUs, C=4, 1024 px, under a 0.5-core
quota, the torch copy (SGLang's line), the buffer copy (the fix), SGLang's own ``ShmPointerMMData`` where it
imports, and the ``control`` arm (a frozen memmove every arm is expressed against, round by round), all
interleaved in one run. Every arm is judged against its pooled baseline: ``rel.*`` (ratios to the control,
which travel between hosts of one machine kind) and the absolute numbers; the invariants compare arms of the
same rounds and need no baseline, so a fresh box still gets a verdict. ``--perf-scale full`` adds the
(threads, quota, resolution, concurrency) grid and the OMP_WAIT_POLICY=PASSIVE arm, marked slow.
"""

from __future__ import annotations

import pytest

from engine_fixtures import (
    SHM_COPY,
    THREAD_ARMS,
    Contrast,
    CpuTierArm,
    CpuTierScenario,
    known_regression,
    transport_arm,
)
from engine_fixtures.transport.handles import skip_reason

QUOTA = 0.5


def quota_arm(copy: str, **kw: object) -> CpuTierArm:
    return CpuTierArm(copy=copy, threads="cpus", quota=QUOTA, resolution=1024, concurrency=4, **kw)


TORCH, BUFFER, CONTROL, SGLANG = (quota_arm(c) for c in ("torch", "buffer", "control", "sglang"))
SGLANG_SKIP = skip_reason(transport_arm("sglang"))
# Bounds from measured noise, not a guess. On 2-core Intel boxes (2026-11-30, 10 runs: CI and this suite's own
# runs) buffer/torch was 1.09-1.26x and stock SGLang/buffer 0.74-0.86x, while one round's paired ratio scatters
# ~11 %, so 15 rounds leave a +-9 % interval at alpha/looks. 1.05x and 0.95x were undecided in about one run in
# five (1.093x: interval 1.000-1.194x); the bound 1.0 (which copy is faster) is decided at every ratio measured.
# A CI run (2026-12-06) left 1.0 undecided at 15 rounds (1.101x, 0.943-1.285x): single windows run 20-40 % slow, so
# the rounds are judged by their 20 % trimmed mean (decide_bound), which one such round does not widen.
# The copy microbenchmarks (test_copy_microbench.py) keep >= 1.05x: there the gap is 1.4-1.7x.
FAN_OUT = Contrast(
    "buffer >= torch under quota", TORCH.id, BUFFER.id, 1.0, ("requests_per_s",), report=(),
    why="the fan-out penalty reproduces: with threads = visible CPUs and a binding quota the torch copy's idle "
        "intra-op workers spin and burn the quota (measured 1.09-1.26x on Intel 2-core boxes, 1.45x on AMD)")
STOCK = Contrast(
    "stock SGLang >= buffer under quota", BUFFER.id, SGLANG.id, 1.0, ("requests_per_s",), report=(),
    why="SGLang as shipped keeps up with the buffer copy; it does not while its ShmPointerMMData copies with torch")
SMOKE = CpuTierScenario("cpu-tier-smoke", (TORCH, BUFFER, CONTROL, *(() if SGLANG_SKIP else (SGLANG,))), CONTROL,
                        (FAN_OUT, *(() if SGLANG_SKIP else (STOCK,))), warmup=2, requests=48, max_rounds=25)
# 48-request windows: ~2.5 s at quota 0.5 (25 CFS periods); the first window after start ran up to 20 % slow.
# Up to 25 rounds while undecided (looks at 5, 10, ..., 25): resampling the 40 rounds of four fresh-clone runs
# (2026-12-06), both contrasts are decided by 15 rounds in 97.7 % of runs and by 25 in 100 % (11.0 rounds on average,
# 9.9 with 15 at most); where both gaps are 1.10x, as the fan-out gap was on the CI box that left 15 rounds
# undecided, 82 % and 97.9 % (docs/results/cpu-tier-rounds-2026-12-06).

pytestmark = [pytest.mark.cpu_tier, pytest.mark.cgroup()]


@pytest.fixture(scope="module")
def smoke(perf_cpu_tier) -> dict:  # type: ignore[no-untyped-def]
    return perf_cpu_tier(SMOKE)


@pytest.mark.perf
@pytest.mark.parametrize("arm", [TORCH, BUFFER, pytest.param(SGLANG, marks=pytest.mark.sglang)], ids=lambda a: a.id)
def test_cpu_tier_arm(arm: CpuTierArm, smoke, perf_record) -> None:  # type: ignore[no-untyped-def]
    perf_record(smoke[arm.id])


@pytest.mark.perf
def test_buffer_copy_beats_torch_under_quota(smoke, perf_invariant) -> None:  # type: ignore[no-untyped-def]
    perf_invariant.check(FAN_OUT)


@pytest.mark.perf
@pytest.mark.sglang
@known_regression(SHM_COPY)
def test_stock_sglang_copy_keeps_up_with_buffer(smoke, perf_invariant) -> None:  # type: ignore[no-untyped-def]
    perf_invariant.check(STOCK)


def grid_scenario(threads: str, quota: float | None, res: int, c: int) -> CpuTierScenario:
    arms = tuple(CpuTierArm(copy=x, threads=threads, quota=quota, resolution=res, concurrency=c)
                 for x in ("torch", "buffer", "control"))
    return CpuTierScenario(f"cpu-tier-grid-{threads}-{quota}-{res}-{c}", arms, arms[2], (), warmup=1,
                        requests=max(48, 2 * c))


GRID = [grid_scenario(t, q, r, n) for t in THREAD_ARMS for q in (None, 0.5, 1.0) for r in (512, 1024, 2048)
        for n in (1, 4, 16) if (t, q, r, n) != ("cpus", QUOTA, 1024, 4)]
PASSIVE = [CpuTierScenario(f"cpu-tier-passive-{q}", (CpuTierArm(copy="torch", quota=q, wait_policy="passive"),
                                              CpuTierArm(copy="torch", quota=q), CpuTierArm(copy="buffer", quota=q),
                                              CpuTierArm(copy="control", quota=q)), CpuTierArm(copy="control", quota=q))
           for q in (None, 0.5, 1.0)]


@pytest.mark.slow
@pytest.mark.perf
@pytest.mark.parametrize("scenario", GRID + PASSIVE, ids=lambda s: s.name)
@pytest.mark.parametrize("which", ["torch", "buffer"])
def test_cpu_tier_grid(scenario: CpuTierScenario, which: str, perf_cpu_tier, perf_record) -> None:  # type: ignore[no-untyped-def]
    results = perf_cpu_tier(scenario)
    arm = next(a for a in scenario.judged_arms if a.copy == which and a.wait_policy == "default")
    perf_record(results[arm.id])

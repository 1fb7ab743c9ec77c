"""GPU tier: one live engine per transport, its arms switched live and interleaved, judged against each other.

Regressions 1 and 2 are contrasts between arms of one engine (``LiveGroup``): the arms are served in mirrored blocks
(A B B A) on the same engine instance, so the offset between two engine starts (TPOT 3 %, TTFT 5 % on the 4B
shape) cancels, and a fresh runner decides them in one run with no pool and no second engine. Each contrast judges
throughput, TTFT and TPOT, the CPU per request of the role its arms differ in, and GPU utilisation. Releases known
to carry a regression are strict xfails with ``raises=InvariantViolated``: a fixed release turns the run red until
its declaration moves. Each arm is also judged against this host's own pool where one was recorded (drift over
time on one runner); a fresh host says ``no-baseline`` there and names the command that records one.
"""

from __future__ import annotations

import pytest

from engine_fixtures import (
    IPC_CACHE_OFF,
    SHM_COPY,
    Arm,
    Contrast,
    CounterBound,
    EngineScenario,
    LiveGroup,
    known_regression,
)
from engine_fixtures.scenarios.live import FAMILIES

Q = "quarter"  # a quarter of the visible CPUs: 4 of the H200's 16, where the seed's copy regression reproduced
# Under a binding quota a request's TPOT reads the CFS throttling of the scheduler more than the copy (the 4B shape on
# the H200, 2026-12-02: buffer vs torch TPOT per-block spread 12.6 %, 38 blocks to resolve 10 %), so the quota arms
# report TPOT with its interval and gate on throughput, TTFT, the tokenizer manager's CPU and the GPU.
QUOTA_TPOT = ("tpot_p50_ms",)
IPC_FAMILIES = (*FAMILIES, "rebuild_ms_per_image")

CPU = LiveGroup(
    "cpu-quota", EngineScenario("cpu-quota", transport="cpu", copy="buffer", quota=Q),
    arms=(Arm("buffer", copy="buffer"), Arm("torch", copy="torch"), Arm("stock"),
          Arm("stock-threads8", threads=8)),
    contrasts=(
        Contrast("stock >= 0.9x buffer", "buffer", "stock", 0.9, report=QUOTA_TPOT,
                 why="regression 1: SGLang's own copy keeps up with the one-memcpy buffer copy under a quota"),
        Contrast("buffer >= torch", "torch", "buffer", report=QUOTA_TPOT,
                 why="the buffer copy is the fix: never slower than torch's intra-op copy under a quota"),
        # The seed's claim for the thread cap is throughput and TTFT (23.4 vs 23.2 req/s); its own main-process CPU
        # stays 3x the buffer copy's (135 % vs 44 %), as on the H200 (2.6x, 2026-12-02): CPU is reported here.
        Contrast("stock at 8 threads >= 0.9x buffer", "buffer", "stock-threads8", 0.9,
                 report=(*QUOTA_TPOT, "cpu_s_per_request.http_server"),
                 why="the seed's other fix: capping the tokenizer manager's intra-op threads (OMP_NUM_THREADS=8)"),
    ))
IPC = LiveGroup(
    # Launched as shipped (SGLANG_USE_IPC_POOL_HANDLE_CACHE unset), so the live "stock" arm is the release's default.
    "cuda_ipc", EngineScenario("cuda_ipc", transport="cuda_ipc", ipc_cache="stock"),
    arms=(Arm("on", ipc_cache="on"), Arm("stock"), Arm("off", ipc_cache="off")),
    contrasts=(
        Contrast("stock >= 0.9x cache on", "on", "stock", 0.9, IPC_FAMILIES,
                 why="regression 2: SGLang as shipped caches the IPC pool handle"),
        Contrast("cache on >= 0.9x off", "off", "on", 0.9, IPC_FAMILIES,
                 why="the pool-handle cache never costs throughput, latency or rebuild time"),
    ))
STOCK_IPC = CounterBound("stock caches the IPC pool handle", "ipc_opens_per_image", "stock", 0.05,
                         why="SGLang as shipped opens the IPC pool handle about once, not once per image")
KNOWN = {"stock >= 0.9x buffer": SHM_COPY, "stock >= 0.9x cache on": IPC_CACHE_OFF}

pytestmark = [pytest.mark.gpu(1), pytest.mark.gpu_tier]


def _contrasts(group: LiveGroup) -> list:
    return [pytest.param(c, marks=[known_regression(KNOWN[c.label])] if c.label in KNOWN else [], id=c.id)
            for c in group.contrasts]


@pytest.mark.perf
@pytest.mark.parametrize("contrast", _contrasts(CPU))
def test_cpu_transport_contrast(contrast: Contrast, perf_live) -> None:  # type: ignore[no-untyped-def]
    perf_live.check(CPU, contrast)


@pytest.mark.perf
@pytest.mark.parametrize("contrast", _contrasts(IPC))
def test_cuda_ipc_contrast(contrast: Contrast, perf_live) -> None:  # type: ignore[no-untyped-def]
    perf_live.check(IPC, contrast)


@known_regression(IPC_CACHE_OFF)
def test_stock_ipc_caches_pool_handles(perf_live) -> None:  # type: ignore[no-untyped-def]
    perf_live.counter(IPC, STOCK_IPC)


@pytest.mark.perf
@pytest.mark.parametrize(("group", "arm"), [pytest.param(g, a.name, id=f"{g.id}/{a.name}")
                                            for g in (CPU, IPC) for a in g.arms])
def test_arm_against_this_hosts_pool(group: LiveGroup, arm: str, perf_live) -> None:  # type: ignore[no-untyped-def]
    perf_live.arm(group, arm)

"""GPU tier: what cannot switch live, measured as groups of engines alive at once on one GPU.

A group's arms are separate launches (``Arm(launch=...)``): started one at a time with one explicit KV size, their
pools read back and compared, measured in mirrored blocks under one load. Two starts of one build differ (TPOT 3 %,
TTFT 5 % on the 4B shape), so the unit of every verdict is the fresh instance group, and this host's A/A history
(recorded by null A/B runs) supplies the between-instance variance where it exists; each verdict says which it used
and what its pass excludes.

- The transport (the weekly step, marker ``weekly``): the cpu transport with the buffer copy (the fix of regression 1)
  against cuda_ipc with the pool-handle cache on (the fix of regression 2), the seed's "cpu reaches most of cuda_ipc"
  at C=16, with no quota.
- The A/B of two builds (``--perf-reference BUILD``, candidate ``--perf-candidate``, default the installed SGLang),
  serving the arms a user runs: each build's engines are launched on the cpu transport and serve, switched live at
  each visit as the nightly does, the buffer copy without a quota (TPOT reads the engine, not CFS throttling),
  SGLang's own copy without a quota and SGLang's own copy under the quarter quota (where regression 1 lives; left
  out, saying so, where no quota can be set); cuda_ipc as shipped is a launch of its own, so it is the A/B's second
  group (two more engines per build do not fit one 80 GB GPU beside these). Each arm is its own contrast of the
  builds, its rows named by arm. Same build on both sides is a null A/B: it adds its pairs to this host's A/A history,
  each arm's to its own shape. Marked ``ab``: skipped without ``--perf-reference``, saying so, and with it the only
  kind of test that runs.
"""

from __future__ import annotations

import pytest

from engine_fixtures import Arm, Contrast, EngineScenario, Group

TRANSPORT = Group(
    "transport",
    arms=(Arm("cpu", launch=EngineScenario("cpu-buffer", transport="cpu", copy="buffer")),
          Arm("cuda_ipc", launch=EngineScenario("cuda_ipc-on", transport="cuda_ipc", ipc_cache="on"))),
    contrasts=(Contrast("cpu(buffer) >= 0.8x cuda_ipc", "cuda_ipc", "cpu", 0.8,
                        metrics=("requests_per_s", "ttft_p50_ms", "tpot_gmean_ms"), report=("ttft_p50_ms",),
                        why="the seed's transport figure: with the buffer copy the cpu transport reaches most of "
                            "cuda_ipc's throughput (TTFT is reported: the cpu path adds the copy to every request's "
                            "first token by design)"),))
AB = EngineScenario("ab-cpu", transport="cpu", copy="buffer")
AB_ARMS = (Arm("buffer", copy="buffer", quota=None), Arm("stock", quota=None), Arm("stock-quota", quota="quarter"))
AB_IPC = EngineScenario("ab-cuda_ipc", transport="cuda_ipc")  # the IPC pool-handle cache as the build ships it
pytestmark = [pytest.mark.gpu(1), pytest.mark.gpu_tier]


@pytest.mark.weekly
@pytest.mark.perf
def test_transport_group(perf_gpu_tier) -> None:  # type: ignore[no-untyped-def]
    perf_gpu_tier.check(TRANSPORT, "cpu(buffer) >= 0.8x cuda_ipc")


@pytest.mark.ab
@pytest.mark.perf
def test_build_ab_cpu(perf_gpu_tier) -> None:  # type: ignore[no-untyped-def]
    perf_gpu_tier(AB, arms=AB_ARMS)


@pytest.mark.ab
@pytest.mark.perf
def test_build_ab_cuda_ipc(perf_gpu_tier) -> None:  # type: ignore[no-untyped-def]
    perf_gpu_tier(AB_IPC)

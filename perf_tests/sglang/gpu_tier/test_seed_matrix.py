"""GPU tier, the nightly: the seed's invariants (``seed_matrix``) as contrasts between arms of one live engine per
transport, its counters, and each contrast arm against this host's pool.

Regressions 1 and 2 are contrasts between arms of one engine (``Group``): the arms are served in mirrored blocks
(A B B A) on the same engine instance, so the offset between two engine starts (TPOT 3 %, TTFT 5 % on the 4B
shape) cancels, and a fresh runner decides them in one run with no pool and no second engine. Each contrast judges
throughput, TTFT, TPOT, the CPU per request of the role its arms differ in, and GPU utilisation, each by its quietest
window statistic, and passes only when its point estimate is within its bound and the run could have flagged a
worsening of ``catches`` beyond it. Releases known to carry a regression are strict xfails with
``raises=InvariantViolated``: a fixed release turns the run red until its declaration moves. Each contrast arm is also
judged against this host's own pool where one was recorded (drift over time on one runner); a fresh host says
``no-baseline`` there and names the command that records one.

The tests are in launch order, so that each of the two launches starts once per session (the factory keeps one
engine live): everything on the cpu launch, then everything on the cuda_ipc launch. The seed's figures and the
transport group are the weekly step (``test_seed_figures.py``, ``test_groups.py``; marker ``weekly``). The
per-pull-request smoke subset (``-m smoke``) decides regressions 1 and 2 alone on two small groups of the same
launches.
"""

from __future__ import annotations

import pytest

from engine_fixtures import Contrast, Group, known_regression
from perf_tests.sglang.gpu_tier.seed_matrix import (
    ADMITS,
    CPU,
    IPC,
    KNOWN,
    SMOKE_CPU,
    SMOKE_IPC,
    STOCK_IPC,
)

pytestmark = [pytest.mark.gpu(1), pytest.mark.gpu_tier]


def _contrasts(group: Group) -> list:
    return [pytest.param(c, marks=[known_regression(KNOWN[c.label])] if c.label in KNOWN else [], id=c.id)
            for c in group.contrasts]


def _pool_arms(group: Group) -> list:
    return [pytest.param(group, a.name, id=f"{group.id}/{a.name}") for a in group.arms if a.blocks is None]


# ---------------------------------------------------------------------------------------------- the cpu launch
@pytest.mark.perf
@pytest.mark.parametrize("contrast", _contrasts(CPU))
def test_cpu_transport_contrast(contrast: Contrast, perf_gpu_tier) -> None:  # type: ignore[no-untyped-def]
    perf_gpu_tier.check(CPU, contrast)


@pytest.mark.perf
@pytest.mark.parametrize(("group", "arm"), _pool_arms(CPU))
def test_cpu_arm_against_this_hosts_pool(group: Group, arm: str, perf_gpu_tier) -> None:  # type: ignore[no-untyped-def]
    perf_gpu_tier.arm(group, arm)


# ----------------------------------------------------------------------------------------- the cuda_ipc launch
@pytest.mark.perf
@pytest.mark.parametrize("contrast", _contrasts(IPC))
def test_cuda_ipc_contrast(contrast: Contrast, perf_gpu_tier) -> None:  # type: ignore[no-untyped-def]
    perf_gpu_tier.check(IPC, contrast)


@known_regression(KNOWN["stock >= 0.9x cache on"])
def test_stock_ipc_caches_pool_handles(perf_gpu_tier) -> None:  # type: ignore[no-untyped-def]
    perf_gpu_tier.counter(IPC, STOCK_IPC)


def test_tp1_admits_the_concurrency(perf_gpu_tier) -> None:  # type: ignore[no-untyped-def]
    perf_gpu_tier.counter(IPC, ADMITS)


@pytest.mark.perf
@pytest.mark.parametrize(("group", "arm"), _pool_arms(IPC))
def test_ipc_arm_against_this_hosts_pool(group: Group, arm: str, perf_gpu_tier) -> None:  # type: ignore[no-untyped-def]
    perf_gpu_tier.arm(group, arm)


# ------------------------------------------------------------------------------- the per-pull-request smoke subset
@pytest.mark.smoke
@pytest.mark.perf
@pytest.mark.parametrize(("group", "contrast"), [
    pytest.param(g, g.contrasts[0], marks=known_regression(KNOWN[g.contrasts[0].label]), id=g.id)
    for g in (SMOKE_CPU, SMOKE_IPC)])
def test_smoke_known_regression(group: Group, contrast: Contrast, perf_gpu_tier) -> None:  # type: ignore[no-untyped-def]
    perf_gpu_tier.check(group, contrast)


@pytest.mark.smoke
@known_regression(KNOWN["stock >= 0.9x cache on"])
def test_smoke_stock_ipc_caches_pool_handles(perf_gpu_tier) -> None:  # type: ignore[no-untyped-def]
    perf_gpu_tier.counter(SMOKE_IPC, STOCK_IPC)

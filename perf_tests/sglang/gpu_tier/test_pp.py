"""Pipeline parallelism under load: the auto micro-batch cap measured, not only linted.

With ``--pp-max-micro-batch-size`` unset SGLang caps each micro-batch at ``max_running_requests // pp_size``
(0.5.16 ``scheduler.py:893-899``). For each depth PP in 2, 4, 8 (the seed's PP8), three arms on PP GPUs at one
concurrency C above M // PP: pp with the auto cap (its hidden cap is the point, so the config lint does not stop
it), pp with an explicit cap of M, and the TP=PP reference of the seed's comparison. The scheduler's running
requests (``running_requests_max``: the largest micro-batch any one scheduler process ran in a segment, from its own
count of every batch, ``engine.running``) must reach min(C, M) on the explicit arm;
on the auto arm that is a strict expected failure in the releases
``PP_MICROBATCH_CAP`` names. A runner with fewer GPUs than PP
skips that depth with the reason; ``--perf-gpus 0,1,...`` names the GPUs.
"""

from __future__ import annotations

import pytest

from engine_fixtures import (
    PP_MICROBATCH_CAP,
    CounterBound,
    EngineHandle,
    EngineScenario,
    find_hidden_caps,
    known_regression,
)

DEPTHS = (2, 4, 8)
M = 16  # max_running_requests
C = 16  # client concurrency: above M // PP for every depth, so the auto cap binds


def scenarios(pp: int) -> tuple[EngineScenario, ...]:
    common = {"transport": "cpu", "copy": "buffer", "concurrency": C, "max_running_requests": M, "gpus": pp}
    return (EngineScenario(f"pp{pp}-auto", pp=pp, lint=False, **common),
            EngineScenario(f"pp{pp}-mb{M}", pp=pp, pp_max_micro_batch_size=M, **common),
            EngineScenario(f"tp{pp}", tp=pp, **common))


def admits(pp: int, arm: str) -> CounterBound:
    return CounterBound(f"pp{pp} {arm} cap admits min(C, M)", "running_requests_max", f"pp{pp}-{arm}", min(C, M),
                        kind="at_least", why=f"the auto cap is M // pp = {M // pp}" if arm == "auto" else "")


pytestmark = pytest.mark.gpu_tier


@pytest.mark.perf
@pytest.mark.parametrize("scenario", [pytest.param(s, marks=pytest.mark.gpu(pp), id=s.id)
                                      for pp in DEPTHS for s in scenarios(pp)])
def test_pp_arm(scenario: EngineScenario, perf_gpu_tier) -> None:  # type: ignore[no-untyped-def]
    perf_gpu_tier(scenario)


@pytest.mark.parametrize("pp", [pytest.param(pp, marks=pytest.mark.gpu(pp), id=f"pp{pp}") for pp in DEPTHS])
def test_explicit_micro_batch_cap_admits_the_load(pp: int, perf_invariant) -> None:  # type: ignore[no-untyped-def]
    perf_invariant.check(admits(pp, f"mb{M}"))


@known_regression(PP_MICROBATCH_CAP)
@pytest.mark.parametrize("pp", [pytest.param(pp, marks=pytest.mark.gpu(pp), id=f"pp{pp}") for pp in DEPTHS])
def test_auto_micro_batch_cap_admits_the_load(pp: int, perf_invariant) -> None:  # type: ignore[no-untyped-def]
    perf_invariant.check(admits(pp, "auto"))


@pytest.mark.gpu(2)
@pytest.mark.parametrize(
    "engine", [pytest.param({"pp": 2, "gpus": (0, 1), "max_running_requests": 16}, id="pp2-auto")], indirect=True
)
def test_pp_auto_micro_batch_cap_is_found(engine: EngineHandle) -> None:
    """pp=2, max_running_requests=16: SGLang resolves the micro-batch cap to 16 // 2 = 8 < concurrency 16."""
    cfg = engine.config
    assert cfg.pp_size == 2
    assert cfg.pp_max_micro_batch_size == 8, f"server reported {cfg.pp_max_micro_batch_size}; see {engine.log_path}"
    (finding,) = find_hidden_caps(cfg, 16)
    assert "--pp-max-micro-batch-size 16" in finding.fix

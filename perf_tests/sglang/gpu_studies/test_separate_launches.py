"""Study, not the default job: the copy arms launched as separate engines, the design the live contrasts replace.

Each scenario starts its own engine (the copy arm set at launch, through the engine's environment) and measures
back-to-back windows on it, judged against this host's pool where one exists. Its windows are what
``scripts/gpu/live_vs_separate.py`` sets beside the same contrast measured live on one engine (the default job's
``buffer >= torch``), to show that switching arms live measures what separate launches measure. Run it with
``python3 -m tox -e perf-gpu -- perf_tests/sglang/gpu_studies/test_separate_launches.py --perf-repeats 10``.
"""

from __future__ import annotations

import pytest

from engine_fixtures import EngineScenario

Q = "quarter"
SCENARIOS = (
    EngineScenario("separate-torch-quota", transport="cpu", copy="torch", quota=Q),
    EngineScenario("separate-buffer-quota", transport="cpu", copy="buffer", quota=Q),
)
pytestmark = [pytest.mark.gpu(1), pytest.mark.gpu_tier]


@pytest.mark.perf
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.id)
def test_separate_launch(scenario: EngineScenario, perf_gpu_tier) -> None:  # type: ignore[no-untyped-def]
    perf_gpu_tier(scenario)

"""Study, not the default job: one contrast measured live on one engine and with separate launches, in one session.

``buffer >= torch`` under a quota of a quarter of the CPUs, the seed's 4B shape: first each copy arm on its own fresh
engine (the arm set at launch), back-to-back windows as the per-arm design measured them; then both arms switched
live on one engine in mirrored blocks. ``python3 -m tools.studies.live_vs_separate RESULTS.json`` sets the two side
by side (live must lie inside the separate engines' interval), and the live pair's rows are what one contrast on one
engine promises (``catches``) from its load. Run it with ``python3 -m tox -e perf-gpu --
tools/studies/test_live_vs_separate.py --perf-repeats 10 --perf-max-repeats 10`` (about 7 minutes).
"""

from __future__ import annotations

import pytest

from engine_fixtures import Arm, Contrast, EngineScenario, Group

Q = "quarter"
SEPARATE = (
    EngineScenario("separate-torch-quota", transport="cpu", copy="torch", quota=Q),
    EngineScenario("separate-buffer-quota", transport="cpu", copy="buffer", quota=Q),
)
PAIR = Group("copy-pair", EngineScenario("copy-pair", transport="cpu", copy="buffer", quota=Q),
                 arms=(Arm("buffer", copy="buffer"), Arm("torch", copy="torch")),
                 contrasts=(Contrast("buffer >= torch", "torch", "buffer"),))
pytestmark = [pytest.mark.gpu(1), pytest.mark.gpu_tier]


@pytest.mark.perf
@pytest.mark.parametrize("scenario", SEPARATE, ids=lambda s: s.id)
def test_separate_launch(scenario: EngineScenario, perf_gpu_tier) -> None:  # type: ignore[no-untyped-def]
    perf_gpu_tier(scenario)


@pytest.mark.perf
def test_live_pair(perf_gpu_tier) -> None:  # type: ignore[no-untyped-def]
    perf_gpu_tier.check(PAIR, "buffer >= torch")

"""GPU tier: the seed's published figures measured on the live engines of ``seed_matrix``, beside the seed's numbers.

Each figure's points are levels of live arms (their intervals over the blocks), each shape says whether this run
reproduces the seed's (``reproduced``, ``not reproduced`` or ``undecided`` from the interval of its ratio). These are
measured rows, never verdicts, and the report draws them; the seed's invariants are the contrasts of
``test_live_arms.py``. A figure fails only when a point was not measured (no window, zero completed requests).
The figures read the live groups measured there (one engine per transport, once per session).
"""

from __future__ import annotations

import pytest

from engine_fixtures.scenarios.figures import SeedFigure
from perf_tests.sglang.gpu_tier.seed_matrix import FIGURES

pytestmark = [pytest.mark.gpu(1), pytest.mark.gpu_tier]


@pytest.mark.parametrize("figure", [pytest.param(f, id=f.id) for f in FIGURES])
def test_seed_figure(figure: SeedFigure, perf_live) -> None:  # type: ignore[no-untyped-def]
    perf_live.figure(figure)

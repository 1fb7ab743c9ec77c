"""GPU tier, the weekly step: the seed's published figures (``seed_matrix.FIGURES``) as measured rows beside the
seed's numbers.

Each point is the level of a live arm of ``CPU_ROWS`` or ``IPC_ROWS`` (every arm a row of ``ROWS`` blocks), with its
interval over the blocks; each shape says whether this run reproduces the seed's (``reproduced``, ``not reproduced``
or ``undecided`` from the interval of its ratio). They are measured rows, never verdicts, and the report draws them; a
figure fails only when a point was not measured (no window, zero completed requests). The tests are in launch order:
the figures of the cpu rows first, then those across transports (the cuda_ipc launch starts), then the cuda_ipc
rows' own. Run with the transport group as one step: ``tox -e perf-gpu-weekly`` or ``gpu_tier.sh weekly``.
"""

from __future__ import annotations

import pytest

from engine_fixtures import SeedFigure
from perf_tests.sglang.gpu_tier.seed_matrix import FIGURES

pytestmark = [pytest.mark.gpu(1), pytest.mark.gpu_tier, pytest.mark.weekly]


@pytest.mark.parametrize("figure", [pytest.param(f, id=f.id) for f in FIGURES])
def test_seed_figure(figure: SeedFigure, perf_gpu_tier) -> None:  # type: ignore[no-untyped-def]
    perf_gpu_tier.figure(figure)

"""Seeded simulations of the gate on its own model (issue 19, items 2 and 7): false alarms by pool size K with
between-run variance present, and the whole-run red rate of a clean run over a scenario's gating metrics.

The simulations share the gate's prediction error (``noise.prediction_terms``) and are checked case by case
against the scalar gate below, so a rate measured here is the gate's own. Bigger runs of the same code:
``python -m engine_fixtures.judge.simulate`` (docs/results/judging-simulations.md).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine_fixtures.judge.decide import ALPHA, decide_history, gate_alpha
from engine_fixtures.judge.noise import NoiseModel
from engine_fixtures.judge.sequential import Budget
from engine_fixtures.judge.simulate import STATUS, Pools, false_alarm_rate, history_decisions, whole_run_red_rate

FLOOR = math.log1p(0.02)
GATE = Budget(5, 5, 15)  # the default budget: the gate judges at alpha / 3 per look


def test_vectorised_decisions_are_the_scalar_gates() -> None:
    rng = np.random.default_rng(7)
    for k in (3, 5, 10):
        x = rng.normal(0, 0.05, (60, k, 1)) + rng.normal(0, 0.05, (60, k, 5))
        cur = rng.normal(0, 0.05, (60, 1)) + rng.normal(0, 0.05, (60, 5)) + rng.choice([0.0, 0.1, 0.3], (60, 1))
        means = x.mean(axis=2)
        pools = Pools(k, 5, means.mean(axis=1), means.var(axis=1, ddof=1),
                      ((x - means[..., None]) ** 2).sum(axis=(1, 2)) / (k * 4))
        fast = history_decisions(pools, cur, +1.0, FLOOR, 0.01, max_detect=math.log1p(0.3))
        for t in range(60):
            d = decide_history(NoiseModel.fit(list(x[t])), cur[t], +1, FLOOR, alpha=0.01, max_detect=math.log1p(0.3))
            assert STATUS[fast[t]] == d.status, (k, t)


@pytest.mark.parametrize("k", [3, 5, 10])
@pytest.mark.parametrize(("between", "within"), [(0.05, 0.05), (0.08, 0.05)])
def test_false_alarms_at_the_gates_alpha_stay_within_one_and_a_half_times_nominal(k: int, between: float,
                                                                                   within: float) -> None:
    """Before the fix a K=3 pool whose between-run estimate was 0 judged at the windows' df: 1.2 % at 0.33 %."""
    alpha = GATE.alpha_per_look()
    rate = false_alarm_rate(np.random.default_rng([k, 19]), 60_000, k, 5, between, within, alpha)
    assert rate <= 1.5 * alpha


@pytest.mark.parametrize(("k", "metrics"), [(3, 6), (5, 6), (5, 10)])
def test_a_whole_clean_run_goes_red_at_most_one_time_in_twenty(k: int, metrics: int) -> None:
    """Independent gating metrics judged sequentially like the runner (strict: inconclusive is red too). Before
    the family split and the K - 1 df: 15 % (K=3, 6 metrics) and 8.8 % (K=5, 10 metrics)."""
    red, undecided = whole_run_red_rate(np.random.default_rng([k, metrics]), 20_000, k, GATE, metrics, 0.08, 0.05)
    assert red <= 0.05
    assert undecided <= 0.01


def test_family_alpha_splits_over_a_scenarios_gating_metrics() -> None:
    assert gate_alpha(ALPHA, 1) == ALPHA
    assert gate_alpha(ALPHA, 2) == ALPHA  # 2 metrics x 2 sides x 1 % = 4 % <= 5 %
    assert gate_alpha(ALPHA / 3, 10) == pytest.approx(0.05 / 20 / 3)
    with pytest.raises(ValueError, match="at least one metric"):
        gate_alpha(ALPHA, 0)

"""The three-valued gate on synthetic data of known noise: decisions, directions, and its error rates.

The error-rate tests are seeded simulations of the model the gate assumes (random run levels plus window
noise); the same gate's behaviour on real runs is measured by the suite itself (README, sensitivity table).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from engine_fixtures.judge.decide import (
    ALPHA,
    NullSample,
    decide_bound,
    decide_contrast,
    decide_history,
    promised_size,
    q,
    runs_to_promise,
)
from engine_fixtures.judge.noise import LINEAR, LOG, NoiseModel
from engine_fixtures.judge.sequential import Budget

FLOOR = math.log1p(0.02)


def runs(rng: np.random.Generator, k: int, n: int, between: float, within: float, level: float = 0.0):
    return [level + rng.normal(0, between) + rng.normal(0, within, n) for _ in range(k)]


def test_noise_model_recovers_known_components() -> None:
    rng = np.random.default_rng(0)
    m = NoiseModel.fit(runs(rng, 400, 8, between=0.05, within=0.03))
    assert m.between_sd == pytest.approx(0.05, rel=0.1)
    assert m.within_sd == pytest.approx(0.03, rel=0.05)
    se, df = m.prediction(8)
    assert se == pytest.approx(math.sqrt((1 + 1 / 400) * m.run_sd**2), rel=1e-9)  # m == n: the textbook interval
    assert df > 300


def test_prediction_error_grows_with_fewer_windows_and_never_drops_below_within_noise() -> None:
    m = NoiseModel.fit([[0.0, 0.1, -0.1, 0.05], [0.01, 0.09, -0.08, 0.0], [0.0, 0.1, -0.1, 0.02]])
    assert m.between_sd == 0.0  # the run means agree better than the windows predict
    se2, _ = m.prediction(2)
    se8, _ = m.prediction(8)
    assert se2 > se8 >= m.within_sd / math.sqrt(8)


@given(st.floats(min_value=-5, max_value=5), st.integers(min_value=0, max_value=2**31))
def test_history_decision_is_invariant_to_a_common_shift(shift: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    base = runs(rng, 4, 5, 0.03, 0.03)
    cur = 0.02 + rng.normal(0, 0.03, 5)
    a = decide_history(NoiseModel.fit(base), cur, +1, FLOOR)
    b = decide_history(NoiseModel.fit([r + shift for r in base]), cur + shift, +1, FLOOR)
    assert a.status == b.status
    assert a.effect == pytest.approx(b.effect, abs=1e-9)


def test_history_directions_and_clear_outcomes() -> None:
    rng = np.random.default_rng(1)
    model = NoiseModel.fit(runs(rng, 5, 5, 0.01, 0.02))
    same = rng.normal(model.level, 0.02, 5)
    assert decide_history(model, same, +1, FLOOR).status == "pass"
    worse = same + math.log(1.5)
    assert decide_history(model, worse, +1, FLOOR).status == "regression"  # larger is worse (latency)
    assert decide_history(model, worse, -1, FLOOR).status == "improvement"  # larger is better (throughput)


def test_too_few_baseline_runs_is_inconclusive_and_says_how_many() -> None:
    model = NoiseModel.fit([[1.0, 1.01, 0.99], [1.0, 1.02, 0.98]])
    d = decide_history(model, [1.5, 1.5, 1.5], +1, FLOOR)
    assert d.status == "inconclusive"
    assert "pools 2 run(s)" in d.reason
    assert ">= 3" in d.reason


def test_a_run_much_noisier_than_its_baseline_is_inconclusive_not_pass() -> None:
    rng = np.random.default_rng(2)
    model = NoiseModel.fit(runs(rng, 6, 6, 0.0, 0.01))
    noisy = model.level + np.array([0.25, -0.2, 0.3, -0.28])  # mean ~0, huge spread
    d = decide_history(model, noisy, +1, FLOOR)
    assert d.status == "inconclusive"
    assert "noisier than its baseline" in d.reason


@pytest.mark.parametrize(("k", "between", "within"), [(3, 0.0, 0.05), (5, 0.05, 0.04), (8, 0.01, 0.05)])
def test_history_gate_error_rates_on_its_own_model(k: int, between: float, within: float) -> None:
    """A change of the size a baseline promises is caught ~90 % of the time (false alarms by K with between-run
    variance present: test_simulations)."""
    rng = np.random.default_rng([k, round(between * 1000)])
    trials, false_alarms, caught, inconclusive = 600, 0, 0, 0
    for _ in range(trials):
        model = NoiseModel.fit(runs(rng, k, 5, between, within))
        clean = decide_history(model, runs(rng, 1, 5, between, within)[0], +1, FLOOR)
        false_alarms += clean.status == "regression"
        inconclusive += clean.status == "inconclusive"
        slowed = decide_history(model, runs(rng, 1, 5, between, within, level=clean.detectable)[0], +1, FLOOR)
        caught += slowed.status == "regression"
    assert false_alarms / trials <= 0.015
    assert inconclusive / trials <= 0.02
    assert caught / trials >= 0.85


def _group(rng: np.random.Generator, shift: float, pairs: int, null: NullSample | None, sd: float = 0.03):
    effects = rng.normal(math.log1p(shift), sd, pairs)
    return decide_contrast(effects, +1, 0.0, FLOOR, math.log1p(0.20), pairs, alpha=0.0025, null=null)


def test_a_group_gate_with_this_hosts_null_history_is_calibrated_and_catches_what_it_promises() -> None:
    """Three fresh pairs, the between-instance spread (3 %) borrowed from six null pairs: a clean A/B is flagged
    about alpha of the time, and a change of the promised size is caught >= 1 - beta of the time."""
    rng = np.random.default_rng(4)
    alarms = caught = 0
    trials = 400
    promised = []
    for _ in range(trials):
        null = NullSample.of(list(rng.normal(0.0, 0.03, 6)), "this host's A/A runs")
        clean = _group(rng, 0.0, 3, null)
        alarms += clean.status == "regression"
        promised.append(clean.detectable)
        caught += _group(rng, math.expm1(clean.detectable), 3, null).status == "regression"
    assert alarms / trials <= 0.015
    assert caught / trials >= 0.85
    assert math.expm1(float(np.median(promised))) < 0.20  # three pairs can now promise something


def test_a_group_gate_without_history_uses_its_own_degrees_of_freedom() -> None:
    """Three pairs alone give t with 2 df: the same 3 % spread cannot promise 20 %, so it is inconclusive, never a
    pass; one pair with no history is inconclusive and says what it needs."""
    spread = [0.03, -0.03, 0.0]  # sd 3 %
    d = decide_contrast(spread, +1, 0.0, FLOOR, math.log1p(0.20), 3, alpha=0.0025)
    assert d.df == 2
    assert d.status == "inconclusive"
    assert "units" in d.reason
    borrowed = decide_contrast(spread, +1, 0.0, FLOOR, math.log1p(0.20), 3, alpha=0.0025,
                               null=NullSample.of([0.03, -0.03, 0.03, -0.03, 0.0, 0.0], "h"))
    assert borrowed.df == 8
    assert borrowed.status == "pass"  # the same three pairs, with the spread known from six null pairs
    rng = np.random.default_rng(5)
    one = _group(rng, 0.0, 1, None)
    assert one.status == "inconclusive"
    pooled = _group(rng, 0.0, 1, NullSample.of([0.01, -0.02, 0.03, 0.0, -0.01], "h"))
    assert pooled.df == 5  # five null units (mean 0 known) and one unit of this run
    assert NullSample.of([0.1, float("nan"), -0.1], "h").units == 2


def _exact(mean: float, sd: float, n: int, seed: int = 0) -> np.ndarray:
    """``n`` unit effects whose mean and sample sd are exactly ``mean`` and ``sd``."""
    z = np.random.default_rng(seed).normal(0.0, 1.0, n)
    return mean + sd * (z - z.mean()) / z.std(ddof=1)


BOUND_90 = -math.log(0.9)  # "candidate >= 0.9x reference": the margin on the judged scale


@given(st.floats(min_value=1e-4, max_value=1.0), st.integers(min_value=3, max_value=200),
       st.floats(min_value=0.01, max_value=2.0), st.integers(min_value=0, max_value=2**31))
def test_a_point_estimate_beyond_the_bound_is_never_a_pass(sd: float, n: int, ceiling: float, seed: int) -> None:
    """0.85x against a 0.9x bound (requests/s: larger is better, sign -1), however narrow or wide the interval and
    however generous the ceiling: regression when the run can flag it, else inconclusive saying why. (Before issue
    34 a run that resolved the ceiling passed it: 82 of 200 simulated at sd 6 % over 10 blocks.)"""
    effects = _exact(math.log(0.85), sd, n, seed)
    d = decide_contrast(effects, -1.0, BOUND_90, FLOOR, ceiling, 200)
    assert d.status in ("regression", "inconclusive")
    if d.status == "inconclusive":
        assert "the point estimate" in d.reason
        assert "beyond the bound" in d.reason
        assert "cannot flag it yet" in d.reason
    pooled = decide_contrast(_exact(math.log(0.85), sd, 3, seed), -1.0, BOUND_90, FLOOR, ceiling, 200,
                             null=NullSample.of(list(_exact(0.0, sd, 8, seed + 1)), "h"))
    assert pooled.status in ("regression", "inconclusive")


def test_for_no_worse_the_floor_is_the_bound() -> None:
    """Bound 1.0 (margin 0): a point estimate 3 % worse is within a 4 % floor and passes, beyond a 2 % floor it
    is not a pass while the run cannot flag it (it would have passed before: D = 5.5 % resolves the 10 %
    ceiling), and flagged beyond the floor once the interval is narrow."""
    effects = _exact(0.03, 0.08, 30)
    assert decide_contrast(effects, +1.0, 0.0, 0.04, 0.10, 60).status == "pass"
    d = decide_contrast(effects, +1.0, 0.0, 0.02, 0.10, 60)
    assert d.status == "inconclusive"
    assert d.detectable <= 0.10  # resolved: only the point estimate stands in the way
    assert "beyond the bound (the floor) 0.02 (judged scale)" in d.reason
    assert decide_contrast(_exact(0.03, 0.01, 30), +1.0, 0.0, 0.02, 0.10, 60).status == "regression"
    assert decide_contrast(_exact(0.015, 0.01, 30), +1.0, 0.0, 0.02, 0.10, 60).status == "pass"


def test_a_clearly_better_candidate_passes_on_a_wide_interval() -> None:
    """Better than the reference beyond the noise excludes any worsening beyond the bound, so neither the
    ceiling (the interval resolves about 50 %, the ceiling is 10 %) nor the bound stands in the way."""
    better = _exact(math.log(1.6), 0.2, 5)  # requests/s 1.6x the reference, sd 20 % per block
    for margin in (0.0, BOUND_90):
        d = decide_contrast(better, -1.0, margin, FLOOR, 0.10, 15)
        assert d.status == "pass"
        assert d.detectable - margin > 0.10
    d = decide_contrast(_exact(0.0, 0.2, 5), -1.0, BOUND_90, FLOOR, 0.10, 15)
    assert d.status == "inconclusive"  # level with the reference on the same wide interval: not resolved
    assert "is within the bound, but 5 units" in d.reason


@given(st.integers(min_value=3, max_value=8), st.floats(min_value=0.0, max_value=0.1),
       st.floats(min_value=0.005, max_value=0.1), st.floats(min_value=-0.3, max_value=0.3),
       st.integers(min_value=2, max_value=12), st.integers(min_value=0, max_value=2**31))
def test_a_pool_pass_has_its_point_estimate_within_the_pools_flag_threshold(
        k: int, between: float, within: float, shift: float, n: int, seed: int) -> None:
    """Issue 34: a pool verdict passes only with its point estimate on the right side of the bound the pool enforces
    (its flag threshold, max(floor, t se) of a run like the pool's) and a worsening of ``catches`` excluded: the pass
    rule |effect| + t(1-beta) se_run <= D implies both, whatever the run's noise. (The floor as the bound was
    simulated and rejected: 50-98 % of whole clean runs would go red; docs/results/judging-simulations.md.)"""
    rng = np.random.default_rng(seed)
    model = NoiseModel.fit(runs(rng, k, 5, between, within))
    cur = rng.normal(shift, within + 1e-9, n)
    d = decide_history(model, cur, +1, FLOOR)
    if d.status == "pass":
        se_ref, df_ref = model.prediction(model.typical_windows)
        assert d.effect <= max(FLOOR, q(0.99, df_ref) * se_ref) + 1e-12
        assert d.detectable is not None
        assert d.effect + q(0.90, d.df) * d.se <= d.detectable + 1e-12


def test_a_pool_too_wide_to_gate_says_so_and_how_many_runs_would_do() -> None:
    rng = np.random.default_rng(9)
    wide = NoiseModel.fit(runs(rng, 3, 5, 0.15, 0.05))
    clean = wide.level + rng.normal(0, 0.05, 5)
    assert decide_history(wide, clean, +1, FLOOR).status in ("pass", "inconclusive")
    d = decide_history(wide, clean, +1, FLOOR, max_detect=math.log1p(0.30))
    assert d.status == "inconclusive"
    assert "too wide to gate" in d.reason
    assert "--from-runs" in d.reason or "no pool of" in d.reason
    k = runs_to_promise(wide, FLOOR, math.log1p(0.30))
    if k is not None:
        assert k > 3
        assert f"a pool of {k} such runs" in d.reason


def test_bound_invariant_three_ways() -> None:
    above = np.log([1.20, 1.25, 1.18, 1.22, 1.21])
    assert decide_bound(above, 1.05).status == "pass"
    equal = np.log([1.00, 1.02, 0.98, 1.01, 0.99])  # e.g. the torch copy forced into the buffer arm
    # five rounds trimmed to three (2 df) cannot yet exclude 1.05x; ten rounds (5 df) can
    assert decide_bound(equal, 1.05).status == "inconclusive"
    assert decide_bound(np.concatenate([equal, equal[::-1]]), 1.05).status == "regression"
    straddle = np.log([1.10, 0.98, 1.12, 1.0, 1.07])
    d = decide_bound(straddle, 1.05)
    assert d.status == "inconclusive"
    assert "straddles the bound 1.05x" in d.reason


def test_a_stalled_window_does_not_hide_a_clear_invariant() -> None:
    """Single CPU-tier windows run 20-40 % slow (1-3 windows in 40): one such round on each side
    widens the mean's interval across the bound while the trimmed mean's stays above it, at the tier's per-look
    alpha (the smoke's 5 looks)."""
    rounds = np.log([1.19, 1.22, 0.80, 1.18, 1.21, 1.17, 1.20, 1.23, 1.19, 1.50])
    alpha = ALPHA / 5
    t_lower = rounds.mean() - stats.t.ppf(1 - alpha, rounds.size - 1) * rounds.std(ddof=1) / math.sqrt(rounds.size)
    assert t_lower < 0.0  # the plain mean's interval would straddle 1.0x
    d = decide_bound(rounds, 1.0, alpha=alpha)
    assert d.status == "pass"
    assert d.df == 5  # two rounds trimmed from each side
    assert math.exp(-d.effect) == pytest.approx(math.exp(np.sort(rounds)[2:8].mean()))


def test_scales() -> None:
    assert LOG.text(math.log(1.1)) == "+10.0%"
    assert LINEAR.text(0.5, "opens/img") == "+0.5 opens/img"
    with pytest.raises(ValueError, match="linear scale"):
        LOG.forward([1.0, 0.0])
    assert LOG.size(0.1) == pytest.approx(math.log(1.1))


def test_budget_validation_and_looks() -> None:
    assert Budget(5, 2, 11).looks == 4
    assert Budget.fixed(5).looks == 1
    with pytest.raises(Exception, match="initial <= maximum"):
        Budget(6, 1, 5)


def test_zero_between_run_estimate_keeps_the_run_means_df() -> None:
    """Three run means that agree better than their windows: the between-run spread is unknown to K - 1 = 2 df,
    not the windows' 12 (issue 19 item 2)."""
    m = NoiseModel.fit([[0.0, 0.1, -0.1, 0.05, 0.0], [0.01, 0.09, -0.08, 0.0, 0.02], [0.0, 0.1, -0.1, 0.02, 0.01]])
    assert m.between_sd == 0.0
    assert m.prediction(5)[1] == 2.0


def test_the_published_promise_is_the_gates() -> None:
    rng = np.random.default_rng(3)
    model = NoiseModel.fit(runs(rng, 5, 5, 0.04, 0.05))
    d = decide_history(model, model.level + rng.normal(0, 0.05, 5), +1, FLOOR, alpha=0.01 / 3)
    assert d.detectable == promised_size(model, FLOOR, 0.01 / 3)

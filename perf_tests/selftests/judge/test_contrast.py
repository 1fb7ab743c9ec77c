"""Contrasts between arms of one live engine: mirrored blocks, per-block effects, the decision and what it promises."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from engine_fixtures.errors import ConfigError
from engine_fixtures.judge.blocks import (
    block_effect,
    effects_by_block,
    mirrored,
    near_order,
    plan,
    ratios_by_block,
    visits,
)
from engine_fixtures.judge.decide import ALPHA, FAMILY_ALPHA, decide_contrast, gate_alpha, q
from engine_fixtures.judge.metrics import metric
from engine_fixtures.judge.paired import GROUP_CEILING_FACTOR, judge_contrast
from engine_fixtures.judge.rows import worse_change
from engine_fixtures.judge.sequential import Budget, label_of
from engine_fixtures.judge.simulate import contrast_outcomes
from engine_fixtures.scenarios.blocks_run import Judging, contrast_verdicts, measure
from engine_fixtures.scenarios.engine import EngineScenario
from engine_fixtures.scenarios.group import Arm, Contrast, Group
from engine_fixtures.scenarios.refusal import throttle_refusal
from engine_fixtures.scenarios.results import control_ratios


def test_a_block_is_a_palindrome_so_a_linear_drift_cancels() -> None:
    block = mirrored(["a", "b", "c"])
    assert block == ["a", "b", "c", "c", "b", "a"]
    drift = {m: [] for m in "abc"}
    for t, m in enumerate(block):
        drift[m].append(100 + 3.0 * t)  # the same arm everywhere, a clock that drifts linearly
    means = {m: float(np.mean(v)) for m, v in drift.items()}
    assert means["a"] == means["b"] == means["c"]
    with pytest.raises(ValueError, match="distinct"):
        mirrored(["a", "a"])


def test_consecutive_windows_of_one_arm_are_one_visit() -> None:
    assert visits([mirrored(["a", "b"]), mirrored(["a", "b"])]) == [("a", 1), ("b", 2), ("a", 2), ("b", 2), ("a", 1)]
    assert plan(["a", "b"], 3, 2) == [("a", [3]), ("b", [3, 3]), ("a", [3, 4]), ("b", [4, 4]), ("a", [4])]


def test_block_effect_is_the_log_ratio_and_skips_unusable_blocks() -> None:
    assert block_effect("requests_per_s", [10.0, 10.0], [11.0]) == pytest.approx(math.log(1.1))
    assert block_effect("requests_per_s", [], [1.0]) is None
    assert block_effect("requests_per_s", [0.0], [1.0]) is None
    effects = effects_by_block("requests_per_s", [10, 10, 20], [0, 0, 1], [11, 22, 5], [0, 1, 2])
    assert effects == pytest.approx([math.log(1.1), math.log(1.1)])  # block 2 has no reference window


def test_contrast_decides_a_real_difference_and_a_null_one() -> None:
    rng = np.random.default_rng(7)
    null = rng.normal(0.0, 0.01, 8)
    d = decide_contrast(null, sign=1.0, margin=0.0, floor=0.01, ceiling=0.10, budget=15)
    assert d.status == "pass"
    assert d.detectable > d.threshold > 0  # the pass names what it excludes
    worse = rng.normal(0.08, 0.01, 8)
    assert decide_contrast(worse, 1.0, 0.0, 0.01, 0.10, 15).status == "regression"
    # allowed to lose 10 %: an 8 % loss holds, a 30 % loss does not
    assert decide_contrast(worse, 1.0, math.log(1 / 0.9), 0.01, 0.10, 15).status == "pass"
    assert decide_contrast(rng.normal(0.3, 0.01, 8), 1.0, math.log(1 / 0.9), 0.01, 0.10, 15).status == "regression"


def test_contrast_is_undecided_on_too_few_or_too_noisy_blocks() -> None:
    d = decide_contrast([0.01, -0.01], 1.0, 0.0, 0.01, 0.10, 15)
    assert d.status == "inconclusive"
    assert "needs >= 3" in d.reason
    noisy = [0.4, -0.4, 0.3, -0.3]
    d = decide_contrast(noisy, 1.0, 0.0, 0.01, 0.10, 15)
    assert d.status == "inconclusive"
    assert "units would" in d.reason
    # a candidate far better than the reference passes on noisy blocks too: it excludes being worse at all
    better = decide_contrast([-0.6, -0.7, -0.8, -0.75, -0.65], 1.0, 0.0, 0.01, 0.10, 15)
    assert better.status == "pass"
    assert better.detectable > 0.10


def test_judge_contrast_row_says_the_bound_the_ratio_and_what_it_catches() -> None:
    ref = [20.0] * 6
    cand = [14.0] * 6
    effects = [math.log(14 / 20) + e for e in (0.01, -0.01, 0.0, 0.005, -0.005, 0.0)]
    v = judge_contrast("stock vs buffer", "requests_per_s", ref, cand, effects, bound=0.9, budget=15)
    assert v.status == "regression"
    assert "0.700x" in v.message
    assert "violated" in v.message
    same = judge_contrast("buffer vs torch", "requests_per_s", ref, ref,
                          [0.01, -0.01, 0.0, 0.005, -0.005, 0.0], budget=15)
    assert same.status == "pass"
    assert same.detectable is not None
    assert 0 < same.detectable < 0.10
    assert "catches" in same.message


def test_catches_is_reported_beyond_the_bound_so_the_margin_is_not_counted_twice() -> None:
    """A 0.95x candidate against 0.9x: ``catches`` is D - margin, the change beyond 0.9x it would flag; the forest
    plot's diamond stays where a pass excludes, D against the reference. For 1.0 both are D."""
    rps = metric("requests_per_s")
    effects = [math.log(0.95) + e for e in (0.01, -0.01, 0.0, 0.005, -0.005, 0.0)]
    d = decide_contrast(effects, rps.sign, -math.log(0.9), rps.scale_floor, rps.ab_size(), 15)
    v = judge_contrast("stock vs buffer", rps, [20.0] * 6, [19.0] * 6, effects, bound=0.9, budget=15)
    assert v.status == d.status == "pass"
    assert v.detectable == pytest.approx(worse_change(rps, d.detectable + math.log(0.9)))
    assert v.detectable == pytest.approx(1 - math.exp(-d.detectable) / 0.9)  # what 0.9x less this share is caught
    assert v.message.endswith(f"holds (catches {v.detectable:.1%} beyond the 0.9x bound)")
    assert v.excludes == pytest.approx(worse_change(rps, d.detectable))
    assert v.flags == pytest.approx(worse_change(rps, d.threshold))
    assert v.excludes > 0.10 > v.detectable  # the old column (D against the reference) counted the 10 % again
    same = judge_contrast("buffer vs torch", rps, [20.0] * 6, [20.0] * 6, [e - math.log(0.95) for e in effects],
                          budget=15)
    assert same.detectable == pytest.approx(same.excludes)
    assert same.message.endswith(f"holds (catches {same.detectable:.1%} worse than the reference)")
    tpot = metric("tpot_gmean_ms")  # lower is better: the bound's loss is a rise, 1/0.8 = +25 %
    quiet = [0.001 * e for e in (1, -1, 2, -2, 1, -1)]
    ab = judge_contrast("", tpot, [4.0] * 6, [4.0] * 6, quiet, units="groups", budget=6, bound=0.8)
    dd = decide_contrast(quiet, tpot.sign, -math.log(0.8), tpot.scale_floor, GROUP_CEILING_FACTOR * tpot.ab_size(), 6)
    assert ab.status == dd.status == "pass"
    assert ab.detectable == pytest.approx(math.exp(dd.detectable) * 0.8 - 1)
    assert ab.message.endswith(f"pass (catches {ab.detectable:.1%} beyond the 0.8x bound)")


def test_a_point_estimate_beyond_the_bound_reads_as_a_ratio_and_says_what_would_decide() -> None:
    """0.87x against 0.9x on blocks that cannot flag it (sd 6 %, 5 blocks): inconclusive, in the bound's terms."""
    effects = [math.log(0.87) + e for e in (0.06, -0.06, 0.0, 0.05, -0.05)]
    v = judge_contrast("stock vs buffer", "requests_per_s", [20.0] * 5, [17.4] * 5, effects, bound=0.9, budget=15)
    assert v.status == "inconclusive"
    assert "inconclusive: the point estimate 0.870x lies beyond the bound 0.900x, but the run cannot flag it yet " \
           "(flagged beyond 0.8" in v.message
    assert "units would if it holds (budget 15)" in v.message


def test_simulated_a_candidate_beyond_its_bound_never_passes_and_one_within_it_mostly_does() -> None:
    """Issue 34, seeded: per-block sd 6 %, 10 blocks, 200 trials. Truly 0.85x against a 0.9x bound passed 47 of
    these 200 at the live ceiling (10 %) and 77 at a group's (21 %) before (the issue's 82 was another draw of the
    group case): the run resolved the ceiling, whatever its point estimate. Now none does (a pass needs a point
    estimate >= 0.9x, 3 se above the truth: about 0.15 % of trials, so 0 of 200 is the expected count). Truly 0.97x
    passes 159 of 200 at the live ceiling (the other 41 do not resolve it yet; 83 % expected) and all 200 at a
    group's, as before."""
    rate = metric("requests_per_s").ab_size()
    for ceiling in (rate, GROUP_CEILING_FACTOR * rate):
        beyond = contrast_outcomes(np.random.default_rng(34), 200, 10, 0.06, 0.85, 0.9, ceiling)
        assert beyond["pass"] == 0
        assert beyond["regression"] >= 100  # the run flags most of them
    within = contrast_outcomes(np.random.default_rng(34), 200, 10, 0.06, 0.97, 0.9, rate)
    assert within["pass"] >= 0.75 * 200  # 83 % expected: P(sample sd <= 7.2 %) with 9 df; 159 here
    assert within["regression"] == 0


def test_a_pass_by_its_interval_needs_the_one_sided_upper_limit_within_the_bound() -> None:
    """The H200's buffer-vs-torch TPOT on 2026-12-03: the candidate 7.5 % better (se 2.5 %, 10 blocks) but too noisy to
    resolve the ceiling; its one-sided interval excludes any worsening beyond the 3 % floor, so it passes and says
    how. Shift the same blocks so the interval's end crosses the bound and it stays inconclusive."""
    tpot = metric("tpot_gmean_ms")
    spread = np.array([1.0, -1.0, 0.5, -0.5, 1.2, -1.2, 0.8, -0.8, 0.0, 0.0])
    spread = spread / spread.std(ddof=1) * 0.079  # sd 7.9 %: se 2.5 % over 10 blocks
    alpha = gate_alpha(ALPHA / 2, 4, sides=1)  # two looks, four gating families
    better = math.log(0.925) + spread
    d = decide_contrast(better, tpot.sign, 0.0, tpot.scale_floor, tpot.ab_size(), 10, alpha=alpha)
    assert d.detectable > tpot.ab_size()  # it does not resolve the ceiling ...
    assert d.effect + q(1 - alpha, d.df) * d.se <= tpot.scale_floor  # ... but its interval ends within the floor
    assert d.status == "pass"
    v = judge_contrast("buffer >= torch", tpot, [5.84] * 10, [5.41] * 10, list(better), budget=10, alpha=ALPHA / 2,
                       family=4)
    assert v.status == "pass"
    assert "one-sided 99.50% interval ends at" in v.message
    assert "within the bound (the floor)" in v.message
    near = better + (tpot.scale_floor - d.effect - 0.5 * q(1 - alpha, d.df) * d.se)  # interval crosses the floor
    e = decide_contrast(near, tpot.sign, 0.0, tpot.scale_floor, tpot.ab_size(), 10, alpha=alpha)
    assert e.effect <= tpot.scale_floor < e.effect + q(1 - alpha, e.df) * e.se
    assert e.status == "inconclusive"


def test_a_live_contrast_splits_alpha_over_its_metrics_not_over_two_sides() -> None:
    """Only a worsening is red in a contrast, so a family of F metrics at two looks keeps F * 2 * per-cell alpha
    within FAMILY_ALPHA with one side; a pool's cell (red on both sides) keeps two."""
    for family in range(1, 9):
        one, two = gate_alpha(ALPHA / 2, family, sides=1), gate_alpha(ALPHA / 2, family, sides=2)
        assert family * 2 * one <= FAMILY_ALPHA + 1e-12
        assert family * 2 * 2 * two <= FAMILY_ALPHA + 1e-12
        assert two <= one <= ALPHA / 2
    assert gate_alpha(ALPHA / 2, 4, sides=1) == pytest.approx(0.005)  # the nightly's contrasts: 4 gating families
    with pytest.raises(ValueError, match="1 or 2 sides"):
        gate_alpha(ALPHA, 1, sides=3)
    # calibrated: a candidate exactly at the 0.9x bound is flagged in about alpha of the trials, never more than 2x
    alpha = gate_alpha(ALPHA / 2, 4, sides=1)
    at = contrast_outcomes(np.random.default_rng(35), 4000, 10, 0.06, 0.9, 0.9, metric("requests_per_s").ab_size(),
                           alpha=alpha)
    assert at["regression"] <= 2 * alpha * 4000
    # the interval rule alone (no ceiling to resolve) passes what sits on the bound in about alpha of the trials too
    by_interval = contrast_outcomes(np.random.default_rng(35), 4000, 10, 0.06, 0.9, 0.9, 0.0, alpha=alpha)
    assert by_interval["pass"] <= 2 * alpha * 4000


def _group() -> Group:
    return Group("g", EngineScenario("g", transport="cpu"),
                     arms=(Arm("buffer", copy="buffer"), Arm("stock"), Arm("slow", patches=(("slow-scheduler", 1.0),))),
                     contrasts=(Contrast("stock vs buffer", "buffer", "stock", 0.9),
                                Contrast("slow vs stock", "stock", "slow")))


def test_group_declarations_are_checked_and_families_follow_the_arms() -> None:
    g = _group()
    assert "cpu_s_per_request.http_server" in g.families(g.contrasts[0])
    assert "cpu_s_per_request.scheduler" in g.families(g.contrasts[1])
    with pytest.raises(ConfigError, match="names arm"):
        Group("x", EngineScenario("x"), arms=(Arm("a"), Arm("b")), contrasts=(Contrast("c", "a", "z"),))
    with pytest.raises(ConfigError, match="IPC cache"):
        Group("x", EngineScenario("x"), arms=(Arm("a"), Arm("b", ipc_cache="off")))
    with pytest.raises(ConfigError, match="threads"):
        Arm("bad", threads=0)


def test_contrast_verdicts_judge_each_measured_family() -> None:
    g = _group()
    rng = np.random.default_rng(3)
    windows = {}
    for arm, rate in (("buffer", 20.0), ("stock", 12.0), ("slow", 12.0)):
        windows[arm] = tuple((b, {"requests_per_s": rate * float(np.exp(rng.normal(0, 0.01))),
                                  "tpot_gmean_ms": 4.3 * float(np.exp(rng.normal(0, 0.01))),
                                  "tpot_p50_ms": 4.3 * float(np.exp(rng.normal(0, 0.01)))})
                             for b in range(6) for _ in range(2))
    rows = contrast_verdicts(g, g.contrasts[0], windows, range(6), Judging(0.01, 15))
    # GPU and CPU were not measured here; TPOT gates on its geometric mean, its p50 is shown beside it
    assert {r.metric: r.status for r in rows} == {"requests_per_s": "regression", "tpot_gmean_ms": "pass",
                                                  "tpot_p50_ms": "report-only"}


def test_a_refused_window_counts_toward_no_verdict_and_a_block_left_without_one_gives_no_effect() -> None:
    """A window the GPU was throttled in keeps only its GPU telemetry (``scenarios.segment.throttle_refusal``): the
    contrast is judged on the blocks whose windows are left, a block with one of an arm's two windows left still
    counts, and one left with none of an arm's windows gives no effect (the existing rule for a short block)."""
    g = _group()
    rng = np.random.default_rng(5)
    refused = {"gpu_throttled_fraction": 0.4, "gpu_throttle_sw_power_cap": 0.4, "gpu_sm_clock_mhz_mean": 1500.0}
    assert throttle_refusal(refused) is not None

    def window(rate: float) -> dict[str, float]:
        return {"requests_per_s": rate * float(np.exp(rng.normal(0, 0.01))), "gpu_throttled_fraction": 0.0}

    def windows(lost: set[tuple[int, int]]) -> dict[str, tuple]:
        out = {arm: [(b, window(rate)) for b in range(6) for _ in range(2)] for arm, rate in (("buffer", 20.0),
                                                                                               ("stock", 12.0))}
        out["buffer"] = [(b, refused if (b, i % 2) in lost else w) for i, (b, w) in enumerate(out["buffer"])]
        return {arm: tuple(ws) for arm, ws in out.items()}

    (whole,) = contrast_verdicts(g, g.contrasts[0], windows(set()), range(6), Judging(0.01, 15))
    (short,) = contrast_verdicts(g, g.contrasts[0], windows({(2, 0), (2, 1), (4, 0)}), range(6), Judging(0.01, 15))
    assert (whole.windows, short.windows) == (6, 5)  # block 2 lost both reference windows, block 4 one of two
    assert short.status == whole.status == "regression"  # stock at 0.6x buffer: the blocks left still decide
    lost = {(b, i) for b in (0, 1, 2, 3) for i in (0, 1)}
    (few,) = contrast_verdicts(g, g.contrasts[0], windows(lost), range(6), Judging(0.01, 15))
    assert few.windows == 2
    assert few.status == "inconclusive"
    assert "needs >= 3" in few.message


def test_an_arm_stops_being_served_once_no_open_contrast_needs_it() -> None:
    engine = EngineScenario("g", transport="cpu", concurrency=16)
    group = Group("g", engine, arms=(Arm("a"), Arm("b", copy="buffer"), Arm("c", copy="torch"), Arm("pool")),
                      contrasts=(Contrast("b >= a", "a", "b"), Contrast("b >= c", "c", "b")))
    names = ["a", "b", "c", "pool"]
    assert group.order(names, 3) == names  # before the first look every arm is served
    # "b >= a" flagged (decided): a is needed by no open contrast; b still is; the pool-only arm always is
    assert group.order(names, 3, {label_of("b >= c: requests_per_s")}) == ["b", "c", "pool"]
    assert group.order(names, 3, set()) == ["pool"]


def test_the_control_is_served_in_every_block_and_the_others_carry_their_ratio_to_it() -> None:
    engine = EngineScenario("g", transport="cpu", concurrency=16)
    group = Group("g", engine, arms=(Arm("a"), Arm("b", copy="buffer"), Arm("row", copy="torch", blocks=2)),
                  contrasts=(Contrast("a >= b", "b", "a"),), control="b")
    assert group.order(["a", "b", "row"], 3, set()) == ["b"]  # its contrast decided: the control is still served
    assert group.rel_arms == ("a",)  # not the control, not a measured row
    windows = {"a": [(0, {"requests_per_s": 18.0, "tpot_gmean_ms": 5.5}), (1, {"requests_per_s": 9.0}),
                     (2, {"requests_per_s": 20.0})],
               "b": [(0, {"requests_per_s": 20.0, "tpot_gmean_ms": 5.0}), (1, {"requests_per_s": 10.0})],
               "row": [(0, {"requests_per_s": 19.0})]}
    ratios = control_ratios(group, "a", windows)
    assert ratios["rel.requests_per_s"] == pytest.approx((0.9, 0.9))  # block 2 has no control window: no ratio
    assert ratios["rel.tpot_gmean_ms"] == pytest.approx((1.1,))
    assert "rel.ttft_p50_ms" not in ratios  # measured by neither: no row, never a 1.0
    assert control_ratios(group, "b", windows) == control_ratios(group, "row", windows) == {}
    for bad in ("nope", "row"):
        with pytest.raises(ConfigError, match="control"):
            Group("g", engine, arms=group.arms, control=bad)
    with pytest.raises(ValueError, match="log-scale"):
        ratios_by_block("achieved_concurrency", [1.0], [0], [1.0], [0])


def test_near_order_serves_each_contrasts_arms_as_neighbours() -> None:
    # the seed's cpu group: three contrasts, all against buffer; the order given had capped and buffer at the ends
    hub = [("buffer", "stock"), ("torch", "buffer"), ("buffer", "capped")]
    order = near_order(["capped", "stock", "torch", "buffer"], hub)
    at = {m: i for i, m in enumerate(order)}
    assert sorted(abs(at["buffer"] - at[m]) for m in ("stock", "torch", "capped")) == [1, 1, 2]  # the least possible
    # after the first look only two contrasts are open: both are neighbours of buffer
    order = near_order(["capped", "torch", "buffer"], [("torch", "buffer"), ("buffer", "capped")])
    assert order[1] == "buffer"
    # ties keep the given order (a shuffled input still decides who goes first); unpaired arms go last
    assert near_order(["a", "b", "c"], [("a", "b")]) == ["a", "b", "c"]
    assert near_order(["b", "c", "a"], [("a", "b")]) == ["b", "a", "c"]
    assert near_order(["pool", "a", "x", "b"], [("a", "b"), ("a", "gone")]) == ["a", "b", "pool", "x"]
    assert near_order(["a", "b"], []) == ["a", "b"]
    # beyond the exhaustive search the given order (paired first) is kept
    many = [f"m{i}" for i in range(10)]
    assert near_order(many, [(many[0], many[9])] + [(many[i], many[i + 1]) for i in range(8)]) == many


def test_a_live_group_serves_each_contrasts_arms_next_to_each_other_and_records_the_order() -> None:
    engine = EngineScenario("g", transport="cpu", concurrency=16)
    group = Group("g", engine, arms=(Arm("buffer", copy="buffer"), Arm("torch", copy="torch"), Arm("stock"),
                                         Arm("capped", threads=4)),
                      contrasts=(Contrast("stock >= 0.9x buffer", "buffer", "stock", 0.9),
                                 Contrast("buffer >= torch", "torch", "buffer"),
                                 Contrast("capped >= 0.9x buffer", "buffer", "capped", 0.9)))
    served: list[str] = []

    def visit(member: str, n: int, _unit: int) -> list[dict[str, float]]:
        served.extend([member] * n)
        return [{"requests_per_s": 20.0} for _ in range(n)]

    def undecided(_windows: object, _units: object, _alpha: float) -> list[str]:  # regression 1 decided at look 1
        return ["buffer >= torch: requests_per_s", "capped >= 0.9x buffer: requests_per_s"]

    for seed in range(6):
        served.clear()
        run = measure(group, Budget(2, 2, 4), visit, undecided, rng=random.Random(seed))
        first, later = run.order[0], run.order[2]
        assert len(run.order) == 4
        assert run.order[1] == first
        assert run.order[3] == later
        assert sorted(abs(first.index("buffer") - first.index(m)) for m in ("stock", "torch", "capped")) == [1, 1, 2]
        assert later[1] == "buffer"
        assert set(later) == {"buffer", "torch", "capped"}
        assert served == [m for order in run.order for m in mirrored(order)]


def test_a_thread_cap_at_the_quota_is_the_quotas_whole_cores() -> None:
    arm = Arm("capped", threads="quota")
    assert arm.resolved(4.0).threads == 4
    assert arm.resolved(0.5).threads == 1
    assert arm.resolved(2.5).live().threads == 2
    assert Arm("eight", threads=8).resolved(4.0).threads == 8  # a number stays what it says
    with pytest.raises(ConfigError, match="needs a CPU quota"):
        arm.resolved(None)
    with pytest.raises(ConfigError, match="resolved against the applied quota"):
        arm.live()
    with pytest.raises(ConfigError, match="threads='all'"):
        Arm("bad", threads="all")


def test_a_contrast_with_a_quota_capped_arm_is_judged_before_and_after_resolving() -> None:
    """The H200's nightly of 2026-12-03 measured the capped arm (resolved in the runner) but its test then judged the
    declared group, whose families() resolved the arm's LiveArm and raised: the verdicts were lost."""
    engine = EngineScenario("g", transport="cpu", concurrency=16, quota="quarter")
    group = Group("g", engine, arms=(Arm("buffer", copy="buffer"), Arm("capped", threads="quota")),
                      contrasts=(Contrast("capped >= 0.9x buffer", "buffer", "capped", 0.9),))
    windows = {a: tuple((b, {"requests_per_s": 20.0 + 0.1 * b}) for b in range(5)) for a in ("buffer", "capped")}
    for g in (group, group.resolved(lambda _a: 4.0)):
        assert "cpu_s_per_request.http_server" in g.families(g.contrasts[0])
        (row,) = contrast_verdicts(g, g.contrasts[0], windows, range(5), Judging(0.01, 10))
        assert row.metric == "requests_per_s"


def test_measured_rows_serve_their_first_blocks_and_switch_the_load_live() -> None:
    engine = EngineScenario("g", transport="cpu", concurrency=16)
    group = Group("g", engine, arms=(Arm("a"), Arm("b", copy="buffer"), Arm("c1", concurrency=1, blocks=2),
                                         Arm("px", image_px=2048, image_content="repeated", blocks=3)),
                      contrasts=(Contrast("b >= a", "a", "b"),))
    assert plan(lambda b: group.order(["a", "c1", "b"], b), 1, 2) == [
        ("a", [1]), ("c1", [1]), ("b", [1, 1]), ("c1", [1]), ("a", [1, 2]), ("b", [2, 2]), ("a", [2])]
    w = group.arm("px").scenario(engine).workload()
    assert (w.concurrency, w.image_resolution, w.image_content) == (16, (2048, 2048), "repeated")
    assert group.arm("c1").scenario(engine).workload().concurrency == 1
    assert group.peak_concurrency == 16
    with pytest.raises(ConfigError, match="measured in 2 blocks only"):
        Group("g", engine, arms=(Arm("a"), Arm("b", blocks=2)), contrasts=(Contrast("b >= a", "a", "b"),))
    with pytest.raises(ConfigError, match="CUDA-graph bucket 16"):
        Group("g", engine, arms=(Arm("a"), Arm("b", concurrency=64)))
    assert Group("g", engine, arms=(Arm("a", blocks=2), Arm("b", blocks=3))).row_blocks == 3
    assert group.row_blocks is None
    with pytest.raises(ConfigError, match="without an interval"):
        Arm("a", blocks=1)
    with pytest.raises(ConfigError, match="image_content"):
        Arm("a", image_content="blank")

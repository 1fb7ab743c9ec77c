"""Null units of a group of launches with replicas: on the pair scale, pooled into a verdict at its own scale, and
recorded into the A/A history; a fresh host's first group kept aside."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from engine_fixtures.judge.decide import NullSample
from engine_fixtures.machine import HostIdentity
from engine_fixtures.scenarios.engine import EngineScenario
from engine_fixtures.scenarios.group import Arm, Group
from engine_fixtures.scenarios.nulls import design_factor, judged_null, pair_units, recorded_units
from engine_fixtures.store.null_history import FRESH_HOST_S, NullHistory, null_entry

LAUNCH = EngineScenario("x", concurrency=2)


def ab(replicas: int) -> Group:
    return Group.ab_of(LAUNCH, *(Arm("a").build, Arm("b").build)).with_replicas(replicas)  # two equal builds


def windows(group: Group, level: dict[str, float], blocks: int = 2) -> dict[str, list[tuple[int, dict[str, float]]]]:
    """Two windows per member and block, each member at its own level of req/s."""
    return {m: [(b, {"requests_per_s": level[m]}) for b in range(blocks) for _ in range(2)] for m in group.members}


def test_a_members_name_says_its_arm_and_one_replica_keeps_the_arms_own_name() -> None:
    assert ab(1).members == ("reference", "candidate")
    g = ab(3)
    assert g.members == ("reference@1", "reference@2", "reference@3", "candidate@1", "candidate@2", "candidate@3")
    assert g.arm_of("candidate@3").name == "candidate"
    assert g.member_pairs("reference", "candidate")[1] == ("reference@2", "candidate@2")


def test_pair_units_are_helmert_contrasts_on_the_pair_scale() -> None:
    g = ab(3)
    level = {"reference@1": 10.0, "reference@2": 11.0, "reference@3": 12.0,
             "candidate@1": 20.0, "candidate@2": 20.0, "candidate@3": 20.0}
    units = pair_units(g, windows(g, level), [0, 0], "requests_per_s")
    r1, r2, r3 = (math.log(level[f"reference@{k}"]) for k in (1, 2, 3))
    assert [e for _, e in units[:2]] == pytest.approx([r2 - r1, (r3 - (r1 + r2) / 2) * math.sqrt(4 / 3)])
    assert [e for _, e in units[2:]] == pytest.approx([0.0, 0.0])
    assert {u for u, _ in units} == {0}


def test_helmert_units_have_the_variance_of_one_engine_against_another() -> None:
    """Simulated: engines with offset sd 0.03; every null unit's variance is 2 x 0.03^2, whatever k."""
    rng = np.random.default_rng(7)
    g = ab(3)
    found: list[list[float]] = [[], []]
    for _ in range(4000):
        level = {m: math.exp(rng.normal(0, 0.03)) for m in g.members}
        units = pair_units(g, windows(g, level, blocks=1), [0], "requests_per_s")
        found[0].append(units[0][1])
        found[1].append(units[1][1])
    assert np.var(found[0]) == pytest.approx(2 * 0.03 ** 2, rel=0.08)
    assert np.var(found[1]) == pytest.approx(2 * 0.03 ** 2, rel=0.08)


def test_a_verdict_pools_the_history_and_its_own_pairs_at_its_own_scale() -> None:
    g = ab(2)
    level = {"reference@1": 10.0, "reference@2": 10.4, "candidate@1": 10.0, "candidate@2": 9.8}
    history = NullSample.of([0.02, -0.04], "this host's A/A history (1 null run(s), x)")
    null = judged_null(g, history, windows(g, level), [0, 0], "requests_per_s")
    assert null is not None
    assert null.units == 4
    own = [math.log(10.4 / 10.0), math.log(9.8 / 10.0)]
    assert null.sum_sq == pytest.approx((0.02 ** 2 + 0.04 ** 2 + sum(e * e for e in own)) * design_factor(g))
    assert design_factor(g) == 0.5  # mean of 2 against mean of 2: half one engine against one
    assert "this run's 2 same-build pair(s)" in null.source
    assert judged_null(ab(1), None, windows(ab(1), {"reference": 1.0, "candidate": 2.0}), [0, 0],
                       "requests_per_s") is None  # one engine a build and no history: nothing to pool


def test_a_null_ab_records_its_own_units_lifted_to_the_pair_scale_beside_its_pairs() -> None:
    g = ab(2)
    level = {"reference@1": 10.0, "reference@2": 10.0, "candidate@1": 11.0, "candidate@2": 11.0}
    rec = recorded_units(g, windows(g, level), [0, 0], ["requests_per_s"], same_build=True)["requests_per_s"]
    assert [e for _, e in rec] == pytest.approx([0.0, 0.0, math.log(1.1) * math.sqrt(2)])
    assert len(recorded_units(g, windows(g, level), [0, 0], ["requests_per_s"])["requests_per_s"]) == 2


HERE = HostIdentity(("GPU-aaaa",), "cpu", 2000.0, "6.1", "runner-a")


def test_the_fresh_hosts_first_group_is_kept_aside_once_per_boot(tmp_path: Path) -> None:
    history = NullHistory(tmp_path, "h200", HERE)
    boot = 1_000_000.0
    assert history.warmup_unit(boot + 120, boot)  # first group, two minutes after boot
    assert not history.warmup_unit(boot + FRESH_HOST_S + 1, boot)  # a warm host
    history.record("s", null_entry("run-1", 4, 3.0, {"tpot_gmean_ms": [0.01]}, warmup={"tpot_gmean_ms": [0.2]},
                                   replicas=2, boot_s=boot))
    assert not history.warmup_unit(boot + 600, boot + 20)  # this boot already has its first group
    assert history.warmup_unit(boot + 9e5 + 60, boot + 9e5)  # a reboot: a fresh host again
    sample = history.sample("s", "tpot_gmean_ms", 4, 3.0)
    assert sample is not None
    assert (sample.units, sample.sum_sq) == (1, pytest.approx(0.01 ** 2))  # the warm-up group aside: unpooled


def test_a_fresh_runners_undecided_ab_row_is_not_a_verdict_until_its_history_holds_enough_units() -> None:
    from engine_fixtures.judge.verdicts import Verdict
    from engine_fixtures.scenarios.nulls import HISTORY_MIN, building

    undecided = Verdict("tpot_gmean_ms", "inconclusive", "group", 5.0, 5.2, 0.04, 0.18, None, 1, "tpot: undecided",
                        "log")
    thin = NullSample.of([0.01] * (HISTORY_MIN - 1), "this host's A/A history")
    v = building(undecided, thin)
    assert v.status == "no-baseline"
    assert not v.is_verdict
    assert f"holds {HISTORY_MIN - 1} of the {HISTORY_MIN} null units" in v.message
    assert building(undecided, None).status == "no-baseline"
    assert building(undecided, NullSample.of([0.01] * HISTORY_MIN, "h")).status == "inconclusive"  # the build's now
    flagged = Verdict("tpot_gmean_ms", "regression", "group", 5.0, 5.6, 0.12, 0.09, None, 1, "tpot: worse", "log")
    assert building(flagged, None) is flagged  # what the run could decide stands, history or not

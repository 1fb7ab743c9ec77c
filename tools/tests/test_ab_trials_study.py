"""The A/B trials study (tools.studies.ab_trials): logged instance groups are cut into trials, each judged with the A/A
units of the other groups only; a null candidate passes, a sized one is caught, and fewer blocks cost fewer minutes."""

from __future__ import annotations

import json
import math
import random

import pytest

from tools.studies.ab_trials import ab_minutes, costs, group_windows, judge_trials, null_units
from tools.studies.components import merged


def study(rng: random.Random, groups: int, blocks: int, size: float, sd_engine: float = 0.01,
          sd_window: float = 0.02) -> dict:
    """An ``ab_study --sizes 0,S`` log: per group a reference, a size-0 and a size-S candidate, fresh engines (an
    offset each), ``blocks`` mirrored blocks of one 3 s window per arm."""
    windows = []
    t = 0.0
    for g in range(groups):
        offset = {arm: rng.gauss(0, sd_engine) for arm in ("reference", "c1", "c2")}
        for b in range(blocks):
            for arm in (("reference", "c1", "c2") if b % 2 == 0 else ("c2", "c1", "reference")):
                slow = offset[arm] + rng.gauss(0, sd_window) + (math.log1p(size / 100) if arm == "c2" else 0.0)
                windows.append({"arm": arm, "engine": f"{arm}-g{g}", "group": g, "visit": len(windows), "t_s": t,
                                "values": {"tpot_gmean_ms": 5.0 * math.exp(slow),
                                           "requests_per_s": 25.0 * math.exp(-slow),
                                           "ttft_p50_ms": 450.0 * math.exp(offset[arm] + rng.gauss(0, sd_window))}})
                t += 3.6
    return {"scenario": "cpu-copy=buffer", "sizes": [0.0, size], "patch": "slow-decode", "blocks_per_group": blocks,
            "window_s": 3.0, "windows": windows,
            "groups": [{"start_s": 90.0, "first_light_s": 6.0, "spin_ms": [0.0, 0.05]} for _ in range(groups)]}


def test_trials_judge_a_null_quiet_and_a_ten_percent_patch_caught() -> None:
    trials = judge_trials(study(random.Random(1), groups=8, blocks=4, size=10.0), pairs=2)
    assert len(trials) == 4
    assert [t["0.0"]["tpot_gmean_ms"]["status"] for t in trials] == ["pass"] * 4
    assert [t["10.0"]["tpot_gmean_ms"]["status"] for t in trials] == ["regression"] * 4
    assert all(t["10.0"]["tpot_gmean_ms"]["delta"] == pytest.approx(0.10, abs=0.04) for t in trials)


def test_a_trial_never_borrows_its_own_null_units() -> None:
    report = study(random.Random(2), groups=6, blocks=2, size=10.0)
    groups = group_windows(report)
    every = null_units(groups, "c1", "tpot_gmean_ms")
    assert len(every) == 6
    for w in report["windows"]:
        if w["group"] < 3 and w["arm"] == "c1":
            w["values"]["tpot_gmean_ms"] *= 1.15
    first, second = judge_trials(report, pairs=3)
    # the first trial's size-0 candidates are 15 % slow: judged with the quiet history of the other groups, the
    # trial flags them; had it borrowed its own units, their 15 % would have widened its own interval
    assert first["0.0"]["tpot_gmean_ms"]["status"] == "regression"
    assert second["0.0"]["tpot_gmean_ms"]["status"] != "regression"


def test_fewer_blocks_are_judged_from_the_first_blocks_and_cost_less() -> None:
    report = study(random.Random(3), groups=4, blocks=6, size=10.0)
    assert {len(ws) for g in group_windows(report, 2) for ws in g.values()} == {2}
    parts = costs(report)
    assert parts["engine_start_s"] == pytest.approx(32.0)
    assert parts["window_s"] == pytest.approx(3.6)
    assert ab_minutes(parts, 3, 2) < ab_minutes(parts, 3, 6)
    assert ab_minutes(parts, 3, 2) == pytest.approx(3 * (64 + 4 * 3.6) / 60)  # two starts, two arms' windows


def test_a_mirrored_block_of_two_windows_per_arm_is_cut_whole() -> None:
    report = study(random.Random(7), groups=2, blocks=8, size=10.0)
    report["blocks_per_group"] = 4  # eight windows per arm: two per mirrored block (an order and its reverse)
    assert {len(ws) for g in group_windows(report, 1) for ws in g.values()} == {2}
    assert {len(ws) for g in group_windows(report) for ws in g.values()} == {8}


def test_calls_are_read_together_and_a_cut_group_is_left_out(tmp_path) -> None:  # type: ignore[no-untyped-def]
    one, two = study(random.Random(4), 3, 2, 10.0), study(random.Random(5), 3, 2, 10.0)
    two["windows"] = [w for w in two["windows"] if not (w["group"] == 2 and w["arm"] == "c2")]  # cut mid-group
    for name, data in (("a.json", one), ("b.json", two)):
        (tmp_path / name).write_text(json.dumps(data))
    report = merged([tmp_path / "a.json", tmp_path / "b.json"])
    assert len(report["groups"]) == 6
    assert len(group_windows(report)) == 5
    assert len(judge_trials(report, pairs=2)) == 2


def test_a_study_without_a_null_candidate_is_refused() -> None:
    report = study(random.Random(6), 4, 2, 10.0)
    report["sizes"] = [5.0, 10.0]
    with pytest.raises(SystemExit, match="size-0 candidate"):
        judge_trials(report, pairs=2)

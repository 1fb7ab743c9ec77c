"""The A/B study's bookkeeping on synthetic windows: a group of the reference and one candidate per size, in the
mirrored blocks of ``judge.blocks``, each size judged against the shared reference with the instance group as the
unit, and the table of counts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine_fixtures.judge.blocks import plan
from tools.studies import ab_study
from tools.studies.ab_study import SCENARIOS, judge_trial, main, render, study_group


def trial_windows(rng: np.random.Generator, slow: list[float], groups: int, blocks: int):  # type: ignore[no-untyped-def]
    """Windows of ``groups`` instance groups: the reference and one candidate per slowdown, each engine with its own
    instance offset (what a fresh start adds: 1 % here)."""
    names = ["reference", *[f"c{i + 1}" for i in range(len(slow))]]
    windows: dict[str, list] = {n: [] for n in names}
    block_unit: list[int] = []
    for g in range(groups):
        offset = {n: 0.01 * rng.standard_normal() for n in names}
        for who, bs in plan(names, len(block_unit), blocks):
            factor = 1.0 if who == "reference" else 1.0 + slow[int(who[1:]) - 1]
            for b in bs:
                tpot = 3.3 * factor * (1 + offset[who]) * (1 + 0.01 * rng.standard_normal())
                windows[who].append((b, {"tpot_gmean_ms": tpot, "requests_per_s": 40.0 / (tpot / 3.3)}))
        block_unit += [g] * blocks
    return windows, block_unit


def test_a_trial_flags_twenty_percent_and_never_flags_a_zero_spin() -> None:
    rng = np.random.default_rng(0)
    group = study_group(SCENARIOS["cpu-copy=buffer"], 2)
    windows, units = trial_windows(rng, [0.0, 0.20], 3, 2)
    zero, slow = judge_trial(group, windows, units, 1, 3), judge_trial(group, windows, units, 2, 3)
    assert slow["tpot_gmean_ms"]["status"] == "regression"
    assert abs(slow["tpot_gmean_ms"]["delta"] - 0.20) < 0.03
    assert zero["tpot_gmean_ms"]["status"] != "regression"
    assert [a.name for a in group.arms] == ["reference", "c1", "c2"]


def test_the_candidates_carry_slow_decode_unless_told(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The default patch is the one that realises its size (GPU time on the decode step); slow-scheduler stays
    selectable, by ``--patch`` or ``PATCH``, and an unknown name is refused by the command line."""
    scenario = SCENARIOS["cpu-copy=buffer"]
    assert dict(study_group(scenario, 1).arms[1].build.env) == {"PERF_ARMS_PATCH": "slow-decode=0"}
    assert dict(study_group(scenario, 1, patch="slow-scheduler").arms[1].build.env) == {
        "PERF_ARMS_PATCH": "slow-scheduler=0"}
    seen: list[str] = []
    monkeypatch.delenv("PATCH", raising=False)
    monkeypatch.setattr(ab_study, "run", lambda *a, patch, **k: seen.append(patch) or {"sizes": []})
    monkeypatch.setattr(ab_study, "show", lambda *a: None)
    argv = ["--model", str(tmp_path), "--out", str(tmp_path / "out")]
    main(argv)
    monkeypatch.setenv("PATCH", "slow-scheduler")
    main(argv)
    main([*argv, "--patch", "slow-tokenizer"])
    assert seen == ["slow-decode", "slow-scheduler", "slow-tokenizer"]
    with pytest.raises(SystemExit):
        main([*argv, "--patch", "slow-gpu"])


def test_render_counts_every_size() -> None:
    trial = {"0.0": {"tpot_gmean_ms": {"status": "pass", "delta": 0.001}},
             "10.0": {"tpot_gmean_ms": {"status": "regression", "delta": 0.1},
                      "requests_per_s": {"status": "inconclusive", "delta": -0.05}}}
    report = {"scenario": "x", "reference_tpot_ms": 3.3, "pairs_per_trial": 3, "sizes": [0.0, 10.0],
              "spin_ms": [0.0, 0.33], "trials": [trial, trial]}
    table = render(report)
    assert table.row_count == 2
    cells = [list(c.cells) for c in table.columns]
    assert cells[4] == ["0/2", "2/2"]  # TPOT regressions per size, as counts
    assert cells[7] == ["0/2", "2/2"]  # any judged metric


def test_window_study_cuts_the_same_records_at_every_length() -> None:
    from engine_fixtures.loadgen.records import RequestRecord
    from tools.studies.window_study import study

    rng = np.random.default_rng(1)
    ends = np.sort(rng.uniform(0, 12, 600))  # 50 req/s over 12 s
    recs = [RequestRecord(i, False, e - 0.4, e - 0.4, e, (e - 0.3, e), 2, "usage") for i, e in enumerate(ends)]
    rows = study(recs, 0.0, 12.0, [1.0, 3.0])
    assert rows["1.0"]["windows"] == 12
    assert rows["3.0"]["windows"] == 4
    assert rows["3.0"]["requests_per_s"] < rows["1.0"]["requests_per_s"]  # Poisson counts: CV falls with length

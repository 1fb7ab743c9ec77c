"""The A/B study's bookkeeping on synthetic windows: mirrored blocks, each size judged against the shared reference
with the engine group as the unit, and the table of counts."""

from __future__ import annotations

import numpy as np

from engine_fixtures.scenarios.ab_study import judge_trial, mirrored, render, size_blocks


def test_mirrored_order_puts_every_arm_at_the_same_mean_position() -> None:
    order = mirrored(3)
    assert order == [0, 1, 2, 3, 3, 2, 1, 0]
    for arm in range(4):
        positions = [i for i, a in enumerate(order) if a == arm]
        assert np.mean(positions) == (len(order) - 1) / 2


def group_blocks(rng: np.random.Generator, slow: list[float], offset: float) -> list:
    """One group's block: the reference (0) and one candidate per slowdown, with a group-wide instance offset."""
    block = []
    for who in mirrored(len(slow)):
        factor = 1.0 if who == 0 else 1.0 + slow[who - 1]
        tpot = 3.3 * factor * (1 + offset) * (1 + 0.01 * rng.standard_normal())
        block.append((who, {"tpot_p50_ms": tpot, "requests_per_s": 40.0 / (tpot / 3.3)}))
    return [block]


def test_a_trial_flags_twenty_percent_and_passes_a_zero_spin() -> None:
    rng = np.random.default_rng(0)
    blocks = [b for _ in range(3) for b in group_blocks(rng, [0.0, 0.20], 0.05 * rng.standard_normal())]
    zero, slow = judge_trial(blocks, [0, 1, 2], 1, 3), judge_trial(blocks, [0, 1, 2], 2, 3)
    assert slow["tpot_p50_ms"]["status"] == "regression"
    assert abs(slow["tpot_p50_ms"]["delta"] - 0.20) < 0.03
    assert zero["tpot_p50_ms"]["status"] == "pass"
    assert len(size_blocks(blocks[0], 2)) == 4  # the reference twice, candidate 2 twice


def test_render_counts_every_size() -> None:
    trial = {"0.0": {"tpot_p50_ms": {"status": "pass", "delta": 0.001}},
             "10.0": {"tpot_p50_ms": {"status": "regression", "delta": 0.1},
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
    from engine_fixtures.scenarios.window_study import study

    rng = np.random.default_rng(1)
    ends = np.sort(rng.uniform(0, 12, 600))  # 50 req/s over 12 s
    recs = [RequestRecord(i, False, e - 0.4, e - 0.4, e, (e - 0.3, e), 2, "usage") for i, e in enumerate(ends)]
    rows = study(recs, 0.0, 12.0, [1.0, 3.0])
    assert rows["1.0"]["windows"] == 12
    assert rows["3.0"]["windows"] == 4
    assert rows["3.0"]["requests_per_s"] < rows["1.0"]["requests_per_s"]  # Poisson counts: CV falls with length

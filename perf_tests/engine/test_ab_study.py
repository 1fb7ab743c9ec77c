"""The A/B study's bookkeeping on synthetic windows: trials split from consecutive blocks, judged sequentially."""

from __future__ import annotations

import numpy as np

from engine_fixtures.scenarios.ab_study import render, trial_statuses


def blocks(rng: np.random.Generator, n: int, slow: float) -> list:
    out = []
    for _ in range(n):
        blk = []
        for who in "ABBA":
            tpot = 3.3 * (1 + slow if who == "B" else 1) * (1 + 0.01 * rng.standard_normal())
            blk.append((who, {"tpot_p50_ms": tpot, "requests_per_s": 40.0 / (tpot / 3.3)}))
        out.append(blk)
    return out


def test_trials_detect_a_twenty_percent_slowdown_and_pass_identical_builds() -> None:
    rng = np.random.default_rng(0)
    slow = trial_statuses(blocks(rng, 12, 0.20), 4)
    same = trial_statuses(blocks(rng, 12, 0.0), 4)
    assert len(slow) == len(same) == 3
    assert all(t["tpot_p50_ms"] == "regression" for t in slow)
    assert all(t["requests_per_s"] == "regression" for t in slow)
    assert all(t["tpot_p50_ms"] == "pass" for t in same)


def test_render_lists_every_size() -> None:
    report = {"scenario": "x", "reference_tpot_ms": 3.3, "trial_blocks": 4,
              "sizes": {"0.0": {"spin_ms": 0.0, "long": {"tpot_p50_ms": {"status": "pass", "delta": 0.001}},
                                "trials": [{"tpot_p50_ms": "pass", "requests_per_s": "pass"}]},
                        "10.0": {"spin_ms": 0.33, "long": {"tpot_p50_ms": {"status": "regression", "delta": 0.1}},
                                 "trials": [{"tpot_p50_ms": "regression", "requests_per_s": "inconclusive"}]}}}
    table = render(report)
    assert table.row_count == 2
    cells = {c.header: list(c.cells) for c in table.columns}
    assert cells["S"] == ["0.0", "10.0"]
    assert cells["spin ms"] == ["0.000", "0.330"]
    assert cells["realised TPOT"] == ["+0.1%", "+10.0%"]
    assert cells["TPOT flagged"] == ["0/1", "1/1"]
    assert cells["req/s flagged"] == ["0/1", "0/1 (1 undecided)"]
    assert cells["long run"] == ["tpot_p50_ms pass", "tpot_p50_ms regression"]

"""``python -m tools.studies.rate_study``: counted vs continuous req/s recomputed from the per-request
records a results file keeps, on a synthetic lockstep run (no engine)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine_fixtures.scenarios.segment import window_requests
from engine_fixtures.store.results import ResultsFile, RunResult
from perf_tests.support.lockstep import closed_loop, segment_of
from tools.studies.rate_study import main, rate_rows

C, PERIOD, WINDOW = 16, 0.65, 3.0


def results_file(tmp_path: Path) -> Path:
    seg = segment_of(closed_loop(C, PERIOD, 64.0, jitter_s=0.004), C, 1.3, 60.0)
    marks = [seg.measure_at + k * WINDOW for k in range(20)]
    windows = [window_requests(seg, t0, t0 + WINDOW) for t0 in marks]
    kept = RunResult("engine/lockstep", {}, {"requests_per_s": (24.6,) * 20}, metadata={"requests": windows})
    cpu_tier = RunResult("mech/copy=torch", {}, {"copy_per_s": (100.0,)})
    path = tmp_path / "results.json"
    path.write_text(ResultsFile((kept, cpu_tier), "gpu-test").dumps())
    return path


def test_the_same_windows_read_quantized_counted_and_steady_continuous(tmp_path: Path) -> None:
    rows, missing = rate_rows(ResultsFile.load(results_file(tmp_path)))
    assert missing == ["mech/copy=torch"]
    (row,) = rows
    assert row.windows == 20
    assert row.counted_cv > 0.05 > 0.01 > row.continuous_cv
    assert row.continuous_mean == pytest.approx(C / PERIOD, rel=0.01)
    assert row.counted_mean == pytest.approx(row.continuous_mean, abs=C / (20 * WINDOW))  # one burst over 60 s


def test_main_prints_the_table_and_writes_the_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "rates.json"
    main([str(results_file(tmp_path)), "--json", str(out)])
    printed = capsys.readouterr().out
    assert "engine/lockstep" in printed
    assert "no stored requests: mech/copy=torch" in printed
    data = json.loads(out.read_text())
    assert data["rows"][0]["windows"] == 20
    assert data["missing"] == ["mech/copy=torch"]


def test_a_file_without_stored_requests_names_why(tmp_path: Path) -> None:
    path = tmp_path / "old.json"
    path.write_text(ResultsFile((RunResult("engine/x", {}, {"requests_per_s": (1.0,)}),), "m").dumps())
    with pytest.raises(SystemExit, match="no result keeps its windows' requests"):
        main([str(path)])
    with pytest.raises(SystemExit, match="does not exist"):
        main([str(tmp_path / "missing.json")])
    bad = tmp_path / "bad.json"
    bad.write_text(ResultsFile((RunResult("engine/x", {}, {"requests_per_s": (1.0,)},
                                          metadata={"requests": [{"rows": []}]}),), "m").dumps())
    with pytest.raises(SystemExit, match="malformed"):
        main([str(bad)])


def live_group_file(tmp_path: Path) -> Path:
    """Two arms of one live group over four blocks, two windows each, the candidate's requests 20 % slower."""
    results = []
    for arm, period in (("ref", 0.65), ("cand", 0.78)):
        windows, blocks, visits = [], [], []
        for b in range(4):
            seg = segment_of(closed_loop(C, period, 10.0, jitter_s=0.004), C, 1.3, 2 * WINDOW)
            windows += [window_requests(seg, seg.measure_at + k * WINDOW, seg.measure_at + (k + 1) * WINDOW)
                        for k in range(2)]
            blocks += [b, b]
            visits += [[b, 0], [b, 1]]
        samples = {"requests_per_s": (1.0,) * 8, "gpu_util_mean": (50.0,) * 8}
        results.append(RunResult(f"engine/x/{arm}/live", {}, samples,
                                 metadata={"requests": windows, "window_block": blocks, "window_visit": visits,
                                           "live_group": "g", "live_arm": arm}))
    path = tmp_path / "live.json"
    path.write_text(ResultsFile(tuple(results), "gpu-test").dumps())
    return path


def test_blocks_give_the_per_block_sd_of_each_pair_per_statistic(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "blocks.json"
    main(["--blocks", str(live_group_file(tmp_path)), "--json", str(out)])
    data = json.loads(out.read_text())
    for mode in ("as stored", "warm-up rule"):
        (row,) = data[mode]
        assert (row["group"], row["pair"], row["blocks"]) == ("g", "ref vs cand", 4)
        sd = row["sd_pct"]
        assert {"requests_per_s", "ttft:p50", "tpot:gmean", "gpu_util_mean"} <= set(sd)
        assert sd["gpu_util_mean"] == 0.0  # a stored per-window sample, linear: points
        assert 0 <= sd["tpot:gmean"] < 5  # the same synthetic timing in every block
    assert set(data["best"]["as stored"]) == {"ttft", "tpot"}
    assert "Per-block sd of the effect" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="one results file"):
        main([str(live_group_file(tmp_path)), str(live_group_file(tmp_path))])

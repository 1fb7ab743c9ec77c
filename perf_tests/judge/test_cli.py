"""perf-baseline CLI: update/compare/show/migrate/history on real files, user errors exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine_fixtures.cli import main
from engine_fixtures.judge.changepoint import detect
from engine_fixtures.store.results import ResultsFile, RunResult


def results_file(tmp: Path, name: str, latency: list[float], date: str = "2025-01-01T00:00:00+00:00") -> Path:
    r = RunResult("demo/c=4", {"c": "4"}, {"latency_p50_ms": tuple(latency)})
    path = tmp / f"results-{name}.json"
    path.write_text(ResultsFile((r,), "m1", date=date).dumps())
    return path


def test_update_compare_show_migrate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bl = str(tmp_path / "bl")
    base = results_file(tmp_path, "a", [10.0, 10.1, 9.9, 10.05, 9.95])
    assert main(["update", "--from", str(base), "--baseline-dir", bl, "--dry-run"]) == 0
    assert not (tmp_path / "bl").exists()
    assert main(["update", "--from", str(base), "--baseline-dir", bl, "--scenario", "other/*"]) == 0
    assert not (tmp_path / "bl").exists()
    assert main(["update", "--from", str(base), "--baseline-dir", bl]) == 0
    assert (tmp_path / "bl" / "m1" / "demo%2Fc=4.json").is_file()
    assert main(["compare", str(base), "--baseline-dir", bl]) == 0
    slow = results_file(tmp_path, "b", [13.0, 13.1, 12.9, 13.05, 12.95])
    assert main(["compare", str(slow), "--baseline-dir", bl, "--markdown"]) == 1
    assert "| demo/c=4 | c=4 | latency_p50_ms | 13 ms | 10 | +30.0% | regression |" in capsys.readouterr().out
    assert main(["show", "--baseline-dir", bl]) == 0
    assert "demo/c=4  latency_p50_ms = 10 ms" in capsys.readouterr().out
    assert main(["migrate", "--baseline-dir", bl]) == 0
    assert capsys.readouterr().out == ""


def test_user_errors_exit_2_and_name_the_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(tmp_path / "nope.json")]) == 2
    assert "does not exist" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format_version": 7}))
    assert main(["update", "--from", str(bad), "--baseline-dir", str(tmp_path)]) == 2
    assert "re-run the suite" in capsys.readouterr().err


def test_history_finds_a_slow_drift_no_single_run_would_flag(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(3)
    # +0.4 % per run with 2 % noise: every run-to-run step is far inside a 10 % tolerance
    for i in range(25):
        lat = 10.0 * (1 + 0.004 * i) * (1 + 0.02 * rng.standard_normal(5))
        results_file(tmp_path, f"{i:02d}", list(lat), date=f"2025-01-{i + 1:02d}T00:00:00+00:00")
    assert main(["history", str(tmp_path)]) == 1
    assert "latency_p50_ms: change at run" in capsys.readouterr().out


def test_no_change_point_in_pure_noise() -> None:
    rng = np.random.default_rng(5)
    false = sum(bool(detect(100 * (1 + 0.02 * rng.standard_normal(20)), permutations=199, seed=s))
                for s in range(20))
    assert false <= 2  # alpha 0.01 per test, a few splits per series

"""RunResult / ResultsFile: validation, round trip and the golden JSON format."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from engine_fixtures.errors import BaselineError
from engine_fixtures.store.results import ResultsFile, RunResult

GOLDEN = Path(__file__).parent / "golden"


def sample_results() -> ResultsFile:
    r = RunResult(
        scenario="mech/copy=torch/quota=0.5/c=4",
        arm={"copy": "torch", "quota": "0.5"},
        samples={"copy_per_s": (101.5, 99.0, 100.25), "cpu_cores.producer": (0.5, 0.49, 0.5)},
        warmup={"copy_per_s": (50.0,)},
        metadata={"quota_applied": 0.5},
    )
    return ResultsFile(results=(r,), machine_key="cpu-test", machine={"cpu": "test"}, suite_commit="abc",
                       date="2025-01-01T00:00:00+00:00", command="pytest", versions={"torch": "2.13"},
                       verdicts={"mech/copy=torch/quota=0.5/c=4": {"copy_per_s": "pass"}})


def test_results_file_matches_golden_and_round_trips() -> None:
    f = sample_results()
    assert f.dumps() == (GOLDEN / "results_v2.json").read_text()
    assert ResultsFile.from_json(json.loads(f.dumps())) == f


def test_format_1_files_are_still_read_without_verdicts() -> None:
    old = ResultsFile.from_json(json.loads((GOLDEN / "results_v1.json").read_text()))
    assert old.results == sample_results().results
    assert old.outcome("mech/copy=torch/quota=0.5/c=4") == "unjudged"
    assert old.run_id == "cpu-test@2025-01-01T00:00:00+00:00"


def test_outcome_is_the_worst_verdict() -> None:
    f = ResultsFile((), "m", verdicts={"s": {"a": "pass", "b": "improvement", "c": "report-only"},
                                       "t": {"a": "inconclusive", "b": "regression"}})
    assert f.outcome("s") == "improvement"
    assert f.outcome("t") == "regression"
    assert f.outcome("u") == "unjudged"


def test_empty_or_nonfinite_samples_are_rejected() -> None:
    with pytest.raises(ValueError, match="empty"):
        RunResult("s", {}, {"requests_per_s": ()})
    with pytest.raises(ValueError, match="non-finite"):
        RunResult("s", {}, {"requests_per_s": (1.0, math.nan)})
    with pytest.raises(ValueError, match="no samples"):
        RunResult("s", {}, {})
    with pytest.raises(KeyError, match="Known metrics"):
        RunResult("s", {}, {"request_per_s": (1.0,)})


def test_unknown_version_and_garbage_name_the_file(tmp_path: Path) -> None:
    p = tmp_path / "r.json"
    p.write_text(json.dumps({**sample_results().to_json(), "format_version": 99}))
    with pytest.raises(BaselineError, match=r"r\.json.*format_version 99"):
        ResultsFile.load(p)
    p.write_text("{not json")
    with pytest.raises(BaselineError, match=r"r\.json.*cannot be read"):
        ResultsFile.load(p)
    with pytest.raises(BaselineError, match="does not exist"):
        ResultsFile.load(tmp_path / "missing.json")


def with_requests() -> ResultsFile:
    """A run whose metadata keeps two windows' request rows (as ``scenarios.segment.window_requests`` writes)."""
    rows = [[round(0.1 * i, 4), round(0.1 * i + 0.05, 4), round(0.1 * i + 0.65, 4), 32] for i in range(40)]
    windows = [{"origin_s": 1000.0, "t0_s": 1.3 + 3 * k, "t1_s": 4.3 + 3 * k,
                "columns": ["sent_s", "first_token_s", "end_s", "output_tokens"], "rows": rows} for k in range(2)]
    r = RunResult("engine/x", {"copy": "torch"}, {"requests_per_s": (24.6, 24.7)},
                  metadata={"requests": windows, "cpus": [0, 1, 2], "command": "pytest -k 'a[1, 2]'"})
    return ResultsFile(results=(r,), machine_key="gpu-test", date="2025-01-01T00:00:00+00:00")


def test_request_rows_are_written_one_per_line_and_read_back_exactly() -> None:
    f = with_requests()
    text = f.dumps()
    assert ResultsFile.from_json(json.loads(text)) == f
    lines = text.splitlines()
    assert sum(line.strip().startswith("[0.1, 0.15, 0.75, 32]") for line in lines) == 2  # a row is one line
    assert '"cpus": [\n' in text  # a dict's list of numbers keeps the indented layout (the golden one)
    assert "pytest -k 'a[1, 2]'" in text  # strings are never touched
    plain = json.dumps(f.to_json(), indent=2, sort_keys=True) + "\n"
    assert json.loads(plain) == json.loads(text)  # files in the fully indented layout read the same
    assert len(text) < 0.5 * len(plain)


SPARSE = {"window_instance": ["e1", "e1", "e2", "e2"], "sample_windows": {"running_requests_max": [0, 2]}}


def test_a_metric_of_some_windows_names_them() -> None:
    """A per-segment value (on its segment's first window) is lined up with per-window metadata by its windows."""
    r = RunResult("s", {}, {"requests_per_s": (1.0, 1.1, 1.2, 1.3), "running_requests_max": (16.0, 15.0)},
                  metadata=SPARSE)
    assert r.windows_of("running_requests_max") == (0, 2)
    assert r.windows_of("requests_per_s") == (0, 1, 2, 3)
    assert r.aligned("window_instance", "running_requests_max") == ["e1", "e2"]
    assert r.aligned("window_instance", "requests_per_s") == ["e1", "e1", "e2", "e2"]
    assert RunResult.from_json(r.to_json()).windows_of("running_requests_max") == (0, 2)
    with pytest.raises(ValueError, match="names 2 windows for 1 samples"):
        RunResult("s", {}, {"running_requests_max": (16.0,)}, metadata=SPARSE)
    old = RunResult("s", {}, {"requests_per_s": (1.0, 1.1), "tpot_p50_ms": (3.0,)},
                    metadata={"window_instance": ["e1", "e1"]})  # written before: cannot be lined up
    assert old.aligned("window_instance", "tpot_p50_ms") is None
    assert old.aligned("window_instance", "requests_per_s") == ["e1", "e1"]


def test_a_live_arms_windows_come_back_with_their_blocks() -> None:
    """``block_windows``: every sample on its own window, each window with its block (what the studies and the
    scripts rebuild a live arm's windows from)."""
    r = RunResult("s", {}, {"requests_per_s": (1.0, 1.1, 1.2, 1.3), "running_requests_max": (16.0, 15.0)},
                  metadata={**SPARSE, "window_block": [0, 0, 1, 1]})
    assert r.block_windows() == [(0, {"requests_per_s": 1.0, "running_requests_max": 16.0}),
                                 (0, {"requests_per_s": 1.1}),
                                 (1, {"requests_per_s": 1.2, "running_requests_max": 15.0}),
                                 (1, {"requests_per_s": 1.3})]
    with pytest.raises(ValueError, match="not the windows of a live arm"):
        RunResult("s", {}, {"requests_per_s": (1.0,)}).block_windows()

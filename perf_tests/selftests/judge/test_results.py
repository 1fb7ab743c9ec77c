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

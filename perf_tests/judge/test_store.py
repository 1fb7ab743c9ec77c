"""BaselineStore: reversible file names, golden format, migration, corrupted/missing files, kill -9."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine_fixtures.errors import BaselineError
from engine_fixtures.store.baselines import (
    Baseline,
    BaselineStore,
    MissingBaseline,
    file_name_of,
    scenario_of,
)
from engine_fixtures.store.results import RunResult

GOLDEN = Path(__file__).parent / "golden"
RESULT = RunResult("mech/copy=torch/quota=0.5/c=4", {"copy": "torch", "quota": "0.5"},
                   {"copy_per_s": (100.0, 101.0, 99.0), "cpu_cores.producer": (0.5, 0.5, 0.5)},
                   {"copy_per_s": (50.0,)}, {"quota_applied": 0.5})
META = {"suite_commit": "abc", "date": "2025-01-01T00:00:00+00:00", "command": "pytest",
        "versions": {"torch": "2.13"}, "machine": {"cpu": "test"}}


@given(st.text(min_size=1, max_size=80))
def test_file_name_is_safe_and_reversible(scenario: str) -> None:
    if len(urllib.parse.quote(scenario, safe="=,+-_.")) + len(".json") > 255:
        with pytest.raises(BaselineError, match="too long"):  # documented: over 255 bytes is refused
            file_name_of(scenario)
        return
    name = file_name_of(scenario)
    assert "/" not in name
    assert "\x00" not in name
    assert not name.startswith(".")
    assert scenario_of(name) == scenario


def test_baseline_matches_golden(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path, "cpu-test")
    path = store.write(Baseline.from_result(RESULT, "cpu-test", META))
    assert path == tmp_path / "cpu-test" / "mech%2Fcopy=torch%2Fquota=0.5%2Fc=4.json"
    assert path.read_text() == (GOLDEN / "baseline_v2.json").read_text()
    loaded = store.load(RESULT.scenario)
    assert isinstance(loaded, Baseline)
    assert loaded.samples == RESULT.samples
    assert loaded.warmup["copy_per_s"] == (50.0,)


def test_v1_is_migrated_in_memory_and_on_disk(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path, "cpu-test")
    store.dir.mkdir(parents=True)
    v1 = {"version": 1, "scenario": RESULT.scenario, "arm": dict(RESULT.arm),
          "samples": {k: list(v) for k, v in RESULT.samples.items()}, "metadata": {}}
    path = store.path_for(RESULT.scenario)
    path.write_text(json.dumps(v1))
    loaded = store.load(RESULT.scenario)
    assert isinstance(loaded, Baseline)
    assert loaded.tolerances["copy_per_s"] == 0.10
    assert store.migrate_all() == [path]
    assert json.loads(path.read_text())["format_version"] == 2
    assert store.migrate_all() == []


@pytest.mark.parametrize("text", ["{", "", "[1, 2]", '{"format_version": 2}', '{"format_version": 99}',
                                  '{"version": 1, "scenario": "x"}'])
def test_corrupted_or_unknown_files_raise_naming_file_and_command(tmp_path: Path, text: str) -> None:
    store = BaselineStore(tmp_path, "cpu-test")
    store.dir.mkdir(parents=True)
    store.path_for(RESULT.scenario).write_text(text)
    with pytest.raises(BaselineError) as info:
        store.load(RESULT.scenario)
    assert str(store.path_for(RESULT.scenario)) in str(info.value)
    assert "perf-baseline update" in str(info.value)


def test_missing_baseline_is_distinct_and_names_update_command(tmp_path: Path) -> None:
    missing = BaselineStore(tmp_path, "cpu-test").load("a/b=1")
    assert isinstance(missing, MissingBaseline)
    assert "perf-baseline update --from" in missing.reason
    assert "--perf-update-baselines" in missing.reason


WRITER = r"""
import sys
from pathlib import Path
from engine_fixtures.store.results import RunResult
from engine_fixtures.store.baselines import Baseline, BaselineStore
store = BaselineStore(Path(sys.argv[1]), "m")
i = 0
print("ready", flush=True)
while True:
    i += 1
    samples = {"copy_per_s": tuple(float(i + k) for k in range(20000))}
    store.write(Baseline.from_result(RunResult("s/x=1", {}, samples), "m"))
"""


def test_sigkill_during_writes_never_leaves_a_torn_file(tmp_path: Path) -> None:
    """A writer of ~400 kB baselines killed at random moments: the file always parses."""
    rng = random.Random(1234)
    store = BaselineStore(tmp_path, "m")
    seen = set()
    for _ in range(8):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE,
                                cwd=Path(__file__).parents[2])
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline() == b"ready\n"
            # wait a random time on a condition that never happens: the process exiting
            with pytest.raises(subprocess.TimeoutExpired):
                proc.wait(timeout=rng.uniform(0.2, 1.2))
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.kill()
            proc.wait(timeout=10)
            proc.stdout.close()
        loaded = store.load("s/x=1")
        if isinstance(loaded, Baseline):
            assert len(loaded.samples["copy_per_s"]) == 20000
            seen.add(loaded.samples["copy_per_s"][0])
    assert len(seen) >= 2, "the writer never completed two different writes; the test proved nothing"
    assert [p.name for p in store.paths()] == ["s%2Fx=1.json"]

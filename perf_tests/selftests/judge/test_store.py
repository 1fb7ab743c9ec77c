"""BaselineStore: reversible file names, golden format, migration, corrupted/missing files, kill -9; a pool judges
only the host that recorded it."""

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
from engine_fixtures.judge.verdicts import judge_result
from engine_fixtures.machine import HostIdentity
from engine_fixtures.store.baselines import MAX_RUNS, Baseline, BaselineRun, BaselineStore, MissingBaseline
from engine_fixtures.store.files import file_name_of, scenario_of
from engine_fixtures.store.results import ResultsFile, RunResult

GOLDEN = Path(__file__).parent / "golden"
SCENARIO = "mech/copy=torch/quota=0.5/c=4"
RESULT = RunResult(SCENARIO, {"copy": "torch", "quota": "0.5"},
                   {"copy_per_s": (100.0, 101.0, 99.0), "cpu_cores.producer": (0.5, 0.5, 0.5)},
                   {"copy_per_s": (50.0,)}, {"quota_applied": 0.5})
HOST = HostIdentity(("GPU-64585b80-01a8-b354-cde3-b738080cee5e",), "Intel(R) Xeon(R) Processor", None,
                    "6.8.0-45-generic", "h200-a")
OTHER = HostIdentity(("GPU-0d1f2e3c-9a8b-4c5d-8e7f-6a5b4c3d2e1f",), "Intel(R) Xeon(R) Processor", None,
                     "6.8.0-45-generic", "h200-b")


def run_of(date: str, values: tuple[float, ...] = (100.0, 101.0, 99.0), verdict: str = "pass",
           host: HostIdentity = HOST) -> ResultsFile:
    result = RunResult(SCENARIO, RESULT.arm, {"copy_per_s": values, "cpu_cores.producer": (0.5, 0.5, 0.5)},
                       RESULT.warmup, RESULT.metadata)
    return ResultsFile((result,), "cpu-test", {"cpu": "test", "host": host.to_json()}, "abc", date, "pytest",
                       {"torch": "2.13"}, verdicts={SCENARIO: {"copy_per_s": verdict}})


def pool(store: BaselineStore, runs: list[ResultsFile]) -> Baseline:
    baseline = None
    for rf in runs:
        run = BaselineRun.from_result(rf.results[0], rf)
        baseline = store.pooled_with(rf.results[0], run, rf.machine) if baseline is None else baseline.with_run(run)
    assert baseline is not None
    return baseline


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


def test_pooled_baseline_matches_golden_and_round_trips(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path, "cpu-test", HOST)
    baseline = pool(store, [run_of(f"2025-01-0{i}T00:00:00+00:00", (100.0 + i, 101.0 + i, 99.0 + i))
                            for i in (1, 2, 3)])
    path = store.write(baseline)
    assert path == tmp_path / "cpu-test" / "mech%2Fcopy=torch%2Fquota=0.5%2Fc=4.json"
    assert path.read_text() == (GOLDEN / "baseline_v3.json").read_text()
    loaded = store.load(SCENARIO)
    assert isinstance(loaded, Baseline)
    assert loaded == baseline
    assert loaded.host == HOST
    assert loaded.runs_for("copy_per_s") == [(101.0, 102.0, 100.0), (102.0, 103.0, 101.0), (103.0, 104.0, 102.0)]
    noise = loaded.noise()
    assert noise["copy_per_s"]["runs"] == 3
    assert "cpu_cores.producer" not in noise  # a diagnostic carries no noise model
    assert noise["copy_per_s"]["detectable"] > 0


def test_pool_keeps_the_newest_runs_and_replaces_a_rerecorded_run(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path, "cpu-test")
    runs = [run_of(f"2025-01-{i:02d}T00:00:00+00:00") for i in range(1, 14)]
    baseline = pool(store, runs)
    assert len(baseline.runs) == MAX_RUNS
    assert baseline.runs[0].date.startswith("2025-01-04")
    again = baseline.with_run(BaselineRun.from_result(runs[-1].results[0], runs[-1]))
    assert len(again.runs) == MAX_RUNS


def test_v2_is_migrated_to_a_one_run_pool_in_memory_and_on_disk(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path, "cpu-test")
    path = store.path_for(SCENARIO)
    path.parent.mkdir(parents=True)
    path.write_text((GOLDEN / "baseline_v2.json").read_text())
    loaded = store.pool(SCENARIO)
    assert isinstance(loaded, Baseline)
    assert loaded.host is None  # written before pools recorded their host: readable, never judges
    assert len(loaded.runs) == 1
    assert loaded.runs[0].verdict == "unjudged"
    assert loaded.runs_for("copy_per_s") == [(100.0, 101.0, 99.0)]
    assert store.migrate_all() == [path]
    assert json.loads(path.read_text())["format_version"] == 3
    assert store.migrate_all() == []


def test_v1_is_migrated_through_v2(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path, "cpu-test")
    store.dir.mkdir(parents=True)
    v1 = {"version": 1, "scenario": SCENARIO, "arm": dict(RESULT.arm),
          "samples": {k: list(v) for k, v in RESULT.samples.items()}, "metadata": {}}
    store.path_for(SCENARIO).write_text(json.dumps(v1))
    loaded = store.pool(SCENARIO)
    assert isinstance(loaded, Baseline)
    assert loaded.runs_for("copy_per_s") == [(100.0, 101.0, 99.0)]


@pytest.mark.parametrize("text", ["{", "", "[1, 2]", '{"format_version": 2}', '{"format_version": 99}',
                                  '{"version": 1, "scenario": "x"}', '{"format_version": 3, "runs": []}'])
def test_corrupted_or_unknown_files_raise_naming_file_and_command(tmp_path: Path, text: str) -> None:
    store = BaselineStore(tmp_path, "cpu-test")
    store.dir.mkdir(parents=True)
    store.path_for(RESULT.scenario).write_text(text)
    with pytest.raises(BaselineError) as info:
        store.load(RESULT.scenario)
    assert str(store.path_for(RESULT.scenario)) in str(info.value)
    assert "perf-baseline update" in str(info.value)


def test_another_hosts_pool_is_no_baseline_naming_both_hosts(tmp_path: Path) -> None:
    """2026-12-01: a clean run on one H200 read -21 % req/s against a pool another H200 (same machine key) had
    recorded; a pool judges only its own host's runs."""
    recorded = BaselineStore(tmp_path, "cpu-test", OTHER)
    recorded.write(pool(recorded, [run_of(f"2025-01-0{i}T00:00:00+00:00", host=OTHER) for i in (1, 2, 3)]))
    missing = BaselineStore(tmp_path, "cpu-test", HOST).load(SCENARIO)
    assert isinstance(missing, MissingBaseline)
    assert "recorded on another host, h200-b (GPU-0d1f2e3c-9a8b-4c5d-8e7f-6a5b4c3d2e1f;" in missing.reason
    assert "this host is h200-a (GPU-64585b80-01a8-b354-cde3-b738080cee5e;" in missing.reason
    assert "perf-baseline update --from-runs 5" in missing.reason
    rows = judge_result(RESULT.samples, None, scenario=SCENARIO)  # what the recorder judges with no pool
    assert {v.status for v in rows if v.metric == "copy_per_s"} == {"no-baseline"}
    assert isinstance(recorded.load(SCENARIO), Baseline)  # the host that recorded it is judged by it
    assert isinstance(BaselineStore(tmp_path, "cpu-test").load(SCENARIO), MissingBaseline)  # an unknown host


def test_a_legacy_pool_without_a_host_record_is_no_baseline(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path, "cpu-test", HOST)
    data = pool(store, [run_of(f"2025-01-0{i}T00:00:00+00:00") for i in (1, 2, 3)]).to_json()
    del data["host"]  # as written before pools recorded their host
    store.dir.mkdir(parents=True)
    store.path_for(SCENARIO).write_text(json.dumps(data))
    missing = store.load(SCENARIO)
    assert isinstance(missing, MissingBaseline)
    assert "recorded on an unknown host (the file has no host record" in missing.reason
    assert "this host is h200-a" in missing.reason
    assert len(store.pool(SCENARIO).runs) == 3  # still readable (perf-baseline show, updates)


def test_same_host_is_judged(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path, "cpu-test", HOST)
    store.write(pool(store, [run_of(f"2025-01-0{i}T00:00:00+00:00", (100.0 + i, 101.0 + i, 99.0 + i))
                             for i in (1, 2, 3)]))
    kernel_upgraded = HostIdentity(HOST.gpu_uuids, HOST.cpu_model, 3800.0, "6.11.0-1-generic", "renamed")
    loaded = BaselineStore(tmp_path, "cpu-test", kernel_upgraded).load(SCENARIO)
    assert isinstance(loaded, Baseline)
    (verdict,) = [v for v in judge_result(RESULT.samples, loaded, scenario=SCENARIO) if v.metric == "copy_per_s"]
    assert verdict.is_verdict


def test_a_run_of_another_host_starts_its_own_pool_in_pooled_with(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path, "cpu-test", HOST)
    store.write(pool(store, [run_of("2025-01-01T00:00:00+00:00", host=OTHER)]))
    rf = run_of("2025-01-02T00:00:00+00:00")
    fresh = store.pooled_with(rf.results[0], BaselineRun.from_result(rf.results[0], rf), rf.machine)
    assert fresh.host == HOST
    assert len(fresh.runs) == 1


def test_missing_baseline_is_distinct_and_names_update_command(tmp_path: Path) -> None:
    missing = BaselineStore(tmp_path, "cpu-test").load("a/b=1")
    assert isinstance(missing, MissingBaseline)
    assert "perf-baseline update --from-runs 5" in missing.reason
    assert "--perf-update-baselines" in missing.reason
    assert ">= 3 independent runs" in missing.reason


WRITER = r"""
import sys
from pathlib import Path
from engine_fixtures.store.baselines import Baseline, BaselineRun, BaselineStore
store = BaselineStore(Path(sys.argv[1]), "m")
i = 0
print("ready", flush=True)
while True:
    i += 1
    run = BaselineRun(f"r{i}", "2025-01-01", {"copy_per_s": tuple(float(i + k) for k in range(20000))})
    store.write(Baseline("s/x=1", {}, "m", (run,)))
"""


def test_sigkill_during_writes_never_leaves_a_torn_file(tmp_path: Path) -> None:
    """A writer of ~400 kB baselines killed at random moments: the file always parses."""
    rng = random.Random(1234)
    store = BaselineStore(tmp_path, "m")
    seen = set()
    for _ in range(8):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE,
                                cwd=Path(__file__).parents[3])
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
        loaded = store.pool("s/x=1")
        if loaded is not None:
            (values,) = loaded.runs_for("copy_per_s")
            assert len(values) == 20000
            seen.add(values[0])
    assert len(seen) >= 2, "the writer never completed two different writes; the test proved nothing"
    assert [p.name for p in store.paths()] == ["s%2Fx=1.json"]

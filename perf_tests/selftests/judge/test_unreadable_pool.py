"""An unreadable pool (truncated, not JSON, an unknown format version, a directory in its place) is reported once at
start and fails only the row that reads it: the CPU tier's other arms are judged, its same-run invariant still
decides, and the results are written (issue 28, case 2). So is a well-formed pool whose samples no measurement gives
(NaN, inf, a number too large for a double, 0 or a negative value of a log-scale metric, ``samples: null``, empty
windows): before, it errored every test after the whole measurement, crashed the session, was judged (a false
regression that "catches nan%") or silently read as no pool (issue 37).

An in-process session through the real ``perf_cpu_tier`` fixture, whose rounds come from a stand-in for
``scenarios.cpu_tier.measure`` that judges between looks as the real one does (``open_cells`` with the fixture's
judge): the path on which the corrupted pool used to error every test of the scenario, without starting a rig.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import engine_fixtures.profile.cpu_tier  # imported once here: an in-process run drops what it imported
import engine_fixtures.report.html
import engine_fixtures.scenarios.cpu_tier  # noqa: F401
from engine_fixtures.machine import MachineInfo
from engine_fixtures.options import Settings
from engine_fixtures.session.perf_session import PerfSession
from engine_fixtures.store.baselines import BaselineRun, BaselineStore, MissingBaseline
from engine_fixtures.store.files import file_name_of
from engine_fixtures.store.results import ResultsFile, RunResult

pytest_plugins = ("pytester",)

TEST_FILE = """
import pytest
from engine_fixtures import Contrast, CpuTierArm, CpuTierScenario
from engine_fixtures.scenarios import cpu_tier
from engine_fixtures.store.results import RunResult

T, B, C = (CpuTierArm(copy=c, quota=0.5, resolution=256, concurrency=2) for c in ("torch", "buffer", "control"))
INV = Contrast("buffer >= torch", T.id, B.id, 1.0, ("requests_per_s",))
S = CpuTierScenario("tiny", (T, B, C), C, (INV,), warmup=0, requests=4)
LEVEL = {"torch": 10.0, "buffer": 14.0, "control": 12.0}


def rounds(scenario, settings, judge, after=None):
    results = [RunResult(a.scenario, a.axes, {"requests_per_s": tuple(LEVEL[a.copy] * (1 + 0.01 * (-1) ** i + 0.002 * i)
                                                                      for i in range(6))}) for a in scenario.arms]
    assert cpu_tier.open_cells(scenario, results, judge, 0.01) == []  # the look between rounds
    return {a.id: r for a, r in zip(scenario.arms, results)}


@pytest.fixture(scope="module")
def smoke(perf_cpu_tier):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cpu_tier, "measure", rounds)
        return perf_cpu_tier(S)


@pytest.mark.perf
@pytest.mark.parametrize("arm", [T, B], ids=lambda a: a.copy)
def test_arm(arm, smoke, perf_record):
    perf_record(smoke[arm.id])


@pytest.mark.perf
def test_invariant(smoke, perf_invariant):
    perf_invariant.check(INV)
"""

TORCH = "mech/copy=torch/threads=cpus/quota=0.5/res=256/c=2"


# What a pool's second run holds instead of its torch windows, as JSON text (json.loads reads NaN, Infinity and
# 1e999, which does not fit a double, as floats; the suite never writes them). 1e308 fits a double, but judging it
# overflowed one: an OverflowError in the verdict row, before the domain check said MAX_MAGNITUDE.
BAD_SAMPLES = {"nan": '{"requests_per_s": [10.1, NaN, 10.0]}', "inf": '{"requests_per_s": [10.1, Infinity, 10.0]}',
               "huge": '{"requests_per_s": [10.1, 1e999, 10.0]}', "zero": '{"requests_per_s": [10.1, 0.0, 10.0]}',
               "1e308": '{"requests_per_s": [10.1, 1e308, 10.0]}',
               "negative": '{"requests_per_s": [10.1, -9.9, 10.0]}', "null": "null",
               "empty-windows": '{"requests_per_s": []}', "no-metric": "{}"}
WHY = {"nan": "has non-finite values [nan]", "inf": "has non-finite values [inf]",
       "huge": "has non-finite values [inf]", "zero": "has values [0.0] where every value must be finite and > 0",
       "negative": "has values [-9.9] where every value must be finite and > 0",
       "1e308": "has values [1e+308] where every value must be finite and > 0 (log scale; within 1e-12 .. 1e+12)",
       "null": "samples must be a mapping of metric names to numbers, got None",
       "empty-windows": "samples['requests_per_s'] is empty", "no-metric": "samples is empty"}


def spoil(path: Path, how: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if how == "directory":
        path.mkdir()
    elif how in BAD_SAMPLES:
        write_pool(path.parent.parent)
        data = json.loads(path.read_text())
        data["runs"][1]["samples"] = "BAD"
        path.write_text(json.dumps(data).replace('"BAD"', BAD_SAMPLES[how]))
    else:
        path.write_text({"truncated": '{"format_version": 3, "scen', "not-json": "this is not JSON\n",
                         "format-99": json.dumps({"format_version": 99, "scenario": TORCH})}[how])


def write_pool(root: Path) -> None:
    """A good pool of three runs of the torch arm, recorded on this host (it judges this host's runs)."""
    here = MachineInfo.collect()
    store, pool = BaselineStore(root, here.key, here.host), None
    for i in range(3):
        result = RunResult(TORCH, {"copy": "torch"}, {"requests_per_s": (10.1 + 0.01 * i, 9.9, 10.0)})
        rf = ResultsFile((result,), here.key, here.as_dict(), "abc", f"2026-12-0{i + 1}T00:00:00+00:00", "pytest",
                         {}, run_id=f"run{i}", verdicts={TORCH: {"requests_per_s": "pass"}})
        run = BaselineRun.from_result(result, rf)
        pool = store.pooled_with(result, run, rf.machine) if pool is None else pool.with_run(run)
    assert pool is not None
    store.write(pool)


@pytest.mark.parametrize("how", ["truncated", "not-json", "format-99", "directory", *BAD_SAMPLES])
def test_every_kind_of_unreadable_pool_is_a_missing_baseline_carrying_its_error(tmp_path: Path, how: str) -> None:
    here = MachineInfo.collect()
    session = PerfSession(Settings(baseline_dir=tmp_path), here.key, here.as_dict())
    spoil(session.store.path_for(TORCH), how)
    base = session.pool(TORCH)
    assert isinstance(base, MissingBaseline)
    assert base.unreadable is not None
    assert str(session.store.path_for(TORCH)) in base.unreadable
    assert session.unreadable == {TORCH: base.unreadable}
    assert base.reason.startswith(f"{TORCH!r} is not judged against its pool: baseline file ")
    if how in BAD_SAMPLES:  # the run and the metric, and the fix
        assert "is malformed (run run1: " in base.unreadable
        assert WHY[how] in base.unreadable
        assert f"restore it from git (`git checkout -- {session.store.path_for(TORCH)}`)" in base.unreadable


# a ValueError (json) and an OSError (read) through the whole session; the other kinds differ only in the message
# nan: before, every test errored after the measurement (ValueError about the log scale) and nothing was written;
# null: an INTERNALERROR at start
@pytest.mark.parametrize("how", ["truncated", "directory", "nan", "null"])
def test_an_unreadable_pool_fails_only_its_row_and_the_invariant_still_decides(
        pytester: pytest.Pytester, how: str) -> None:
    pytester.makepyfile(test_tiny=TEST_FILE)
    pool = pytester.path / "bl" / MachineInfo.collect().key / file_name_of(TORCH)
    spoil(pool, how)
    r = pytester.runpytest_inprocess("-rfs", "--perf-strict", "no", "--perf-history-url", "none",
                                     "--perf-baseline-dir", str(pytester.path / "bl"),
                                     "--perf-results-dir", str(pytester.path / "out"))
    text = r.stdout.str()
    r.assert_outcomes(failed=1, skipped=1, passed=1)  # before: 3 errors, one per test, the same traceback each
    r.stdout.fnmatch_lines(["*FAILED*test_arm?torch?*BaselineError*"])
    header = text.split("collected ")[0]
    assert f"perf: unreadable pool: baseline file {pool}" in header  # said once, at start, before anything runs
    assert text.count(f"perf: unreadable pool: baseline file {pool}") == 1
    (results,) = (pytester.path / "out").glob("results-*.json")
    assert json.loads(results.read_text())["verdicts"][TORCH]["requests_per_s"] == "no-baseline"
    summary = (pytester.path / "out" / "summary.md").read_text()
    assert f"unreadable pool, its rows not judged: baseline file {pool}" in summary

"""The pytest-benchmark export, end to end through pytest and read back with pytest-benchmark's own code
(``support.benchmark_files``: its ``FileStorage`` and its ``pytest-benchmark compare`` command): one entry per arm
and metric with the suite's verdict in extra_info, the ``benchmark`` fixture's rounds filed per arm, the file's layout
the same as an entry pytest-benchmark makes itself (so the export cannot drift from its schema unseen), and
``--benchmark-json``, ``--benchmark-autosave`` and ``pytest-benchmark compare`` over two runs."""

from __future__ import annotations

import json

import pytest

from engine_fixtures.judge.verdicts import Verdict
from engine_fixtures.session.benchmarks import SUITE_OPTIONS, unscaled, verdict_info
from perf_tests.support import REPO_ROOT, benchmark_files

pytest_plugins = ("pytester",)

TEST_FILE = """
import pytest
from engine_fixtures.session.benchmarks import timed_rounds
from engine_fixtures.store.results import RunResult

RATES = {"a": (10.0, 10.4, 9.8, 10.1, 10.3), "b": (12.0, 12.2, 11.9, 12.3, 12.1)}
# A 20x difference over 10 paired rounds: the demo shows the export, so its contrast must decide on a loaded 2-core
# box (4x over 6 rounds read a 99 % interval of 0.57-37x once in CI, a fast round preempted to 6 ms)
WORK = {"slow": 400_000, "fast": 20_000}


def result(arm):
    return RunResult(f"demo/arm={arm}", {"arm": arm},
                     {"requests_per_s": RATES[arm], "latency_p50_ms": tuple(1000 / r for r in RATES[arm]),
                      "rel.requests_per_s": tuple(r / 12.5 for r in RATES[arm])})


@pytest.mark.parametrize("arm", ["a", "b"])
def test_arm(perf_record, arm):
    perf_record(result(arm))


def test_b_beats_a(perf_invariant):
    perf_invariant("b >= a", "requests_per_s", result("a"), result("b"), 1.0)


def test_timed(benchmark, perf_invariant):
    seconds = timed_rounds(benchmark, lambda arm: sum(range(WORK[arm])), ["slow", "fast", "fast", "slow"] * 5,
                           group="fast >= slow", work=WORK)
    assert [len(s) for s in seconds.values()] == [10, 10]
    perf_invariant("fast >= slow", "copy_per_s", [1 / s for s in seconds["slow"]],
                   [1 / s for s in seconds["fast"]], 1.0)


def test_plain(benchmark):
    benchmark.pedantic(sum, args=([1, 2],), rounds=3)
"""
SUITE = {f"demo/arm={arm}::{m}" for arm in "ab" for m in ("requests_per_s", "latency_p50_ms", "rel.requests_per_s")}
TIMED = {"test_timed[slow]", "test_timed[fast]"}


@pytest.fixture
def demo(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """The demo file; the run inside is no xdist worker (under one, pytest-benchmark disables its fixture)."""
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    pytester.makepyfile(test_demo=TEST_FILE)
    return pytester


def run(p: pytest.Pytester, *args: str) -> pytest.RunResult:
    r = p.runpytest("--perf-strict", "yes", "--perf-baseline-dir", str(p.path / "bl"), "--perf-results-dir",
                    str(p.path / "out"), *args)
    r.assert_outcomes(passed=3, skipped=2)  # the arms: no pool on a fresh machine, said with the command
    return r


def test_every_arm_and_metric_is_an_entry_with_its_verdict(demo: pytest.Pytester) -> None:
    out = demo.path / "export.json"
    r = run(demo, "--benchmark-json", str(out))
    # pytest-benchmark's own table of the run: the suite's entries in their metric's unit, never rescaled as times
    r.stdout.fnmatch_lines(["*benchmark 'rel.requests_per_s': 2 tests*", "Name (time in s) *", "*",
                            "demo/arm=a *0.8080*"])  # its median, 0.808 x control, not 808 "ms"
    (data,) = benchmark_files.runs(out)
    entries = {e["fullname"].removeprefix("test_demo.py::"): e for e in data["benchmarks"]}
    assert set(entries) == SUITE | TIMED | {"test_plain"}
    (results,) = (demo.path / "out").glob("results-*.json")  # the suite's own file, which the export names
    assert data["sglang_perf_suite"]["results"] == str(results)
    (saved,) = (demo.path / "out").glob("0001_benchmark_*.json")  # pytest-benchmark's FileStorage numbers runs
    assert saved.name == f"0001_benchmark_{results.stem.removeprefix('results-')}.json"
    (beside,) = benchmark_files.runs(saved)
    assert [e["fullname"] for e in beside["benchmarks"]] == [e["fullname"] for e in data["benchmarks"]]
    a = entries["demo/arm=a::requests_per_s"]
    assert (a["name"], a["group"], a["param"]) == ("demo/arm=a", "requests_per_s", "requests_per_s")
    assert a["stats"]["data"] == [10.0, 10.4, 9.8, 10.1, 10.3]  # the suite's windows, in the metric's unit
    assert (a["stats"]["min"], a["stats"]["max"], a["stats"]["median"], a["stats"]["rounds"]) == (9.8, 10.4, 10.1, 5)
    info = a["extra_info"]
    assert (info["verdict"], info["unit"], info["better"], info["scenario"]) == (
        "no-baseline", "req/s", "higher", "demo/arm=a")
    assert info["test"] == "test_demo.py::test_arm[a]"
    # the same-run invariant over both arms; its pass rests on its one-sided interval, so it names no catches
    assert info["judged_by"] == [{"row": "requests_per_s ratio b >= a", "verdict": "pass", "catches": None}]
    assert entries["demo/arm=b::latency_p50_ms"]["extra_info"]["better"] == "lower"

    fast, slow = entries["test_timed[fast]"], entries["test_timed[slow]"]
    for e in (fast, slow):  # the fixture's rounds, filed by arm: pytest-benchmark's own seconds per round
        assert e["group"] == "fast >= slow"
        assert e["stats"]["rounds"] == 10
        assert e["extra_info"]["verdict"] == "pass"
        assert e["extra_info"]["judged_by"][0]["row"] == "copy_per_s ratio fast >= slow"
        assert e["extra_info"]["work"] == {"slow": 400_000, "fast": 20_000}
        assert "arm_of_round" not in e["extra_info"]
    assert fast["stats"]["median"] < slow["stats"]["median"]
    assert fast["params"]["arm"] == "fast"


def test_the_export_has_pytest_benchmarks_own_layout(demo: pytest.Pytester) -> None:
    """Every entry has exactly the keys, stats and options layout of the entry pytest-benchmark made itself in the
    same run (``test_plain``), and the file loads through its ``FileStorage``: a field it adds or drops shows."""
    out = demo.path / "export.json"
    run(demo, "--benchmark-json", str(out))
    (data,) = benchmark_files.runs(out)
    assert {"machine_info", "commit_info", "benchmarks", "datetime", "version"} <= set(data)
    assert data["machine_info"]["python_implementation"]  # pytest-benchmark's own machine_info
    assert {"id", "dirty", "branch"} <= set(data["commit_info"])
    plain = next(e for e in data["benchmarks"] if e["name"] == "test_plain")
    for e in data["benchmarks"]:
        assert set(e) == set(plain), e["fullname"]
        assert set(e["stats"]) == set(plain["stats"]), e["fullname"]
        assert json.dumps(e["extra_info"])  # plain JSON
    flat = benchmark_files.benchmarks(out)  # as pytest-benchmark compare sees them
    assert len(flat) == len(data["benchmarks"])
    assert all({"min", "max", "mean", "stddev", "median", "iqr", "rounds", "ops"} <= set(b) for b in flat)


def test_compare_reads_two_autosaved_runs(demo: pytest.Pytester) -> None:
    for _ in range(2):  # into pytest-benchmark's default storage, ./.benchmarks
        run(demo, "--benchmark-autosave")
    files = sorted((demo.path / ".benchmarks").rglob("*.json"))
    assert len(files) == 2
    assert {b["fullname"].removeprefix("test_demo.py::") for b in benchmark_files.benchmarks(*files)} == (
        SUITE | TIMED | {"test_plain"})
    r = benchmark_files.compare("--columns", "min,median,max,rounds", cwd=demo.path)  # every saved run
    assert r.returncode == 0, r.stderr
    for name in ("demo/arm=a", "demo/arm=b", "test_timed[fast]", "test_timed[slow]"):
        assert r.stdout.count(f"{name} (") == 2 * (3 if name.startswith("demo") else 1), (name, r.stdout)
    # from this repository's root, where it imports conftest.py and parses pyproject.toml (warnings are errors)
    r = benchmark_files.compare(*map(str, files), cwd=REPO_ROOT)
    assert r.returncode == 0, r.stderr
    assert "demo/arm=b" in r.stdout
    # the same two runs as every run saves them beside its results JSON, told apart by their numbers
    r = benchmark_files.compare("-k", "requests_per_s", cwd=demo.path, storage=demo.path / "out")
    assert r.returncode == 0, r.stderr
    for run_number in ("0001", "0002"):
        assert r.stdout.count(f"demo/arm=a ({run_number}_benchma)") == 2, r.stdout  # req/s and rel.req/s


def test_an_entry_names_its_own_row_else_the_worst_that_judges_it() -> None:
    def row(status: str, catches: float | None) -> Verdict:
        return Verdict(f"m {status}", status, "history", None, 1.0, None, catches, None, 5, f"{status} row")

    own = verdict_info(row("pass", 0.07), [row("regression", None)])
    assert (own["verdict"], own["catches"], own["message"]) == ("pass", 0.07, "pass row")
    judged = verdict_info(None, [row("pass", 0.05), row("inconclusive", None), row("regression", 0.1)])
    assert (judged["verdict"], judged["catches"]) == ("regression", 0.1)
    assert [j["verdict"] for j in judged["judged_by"]] == ["pass", "inconclusive", "regression"]
    assert verdict_info(None, [])["verdict"] is None


def test_a_table_of_the_suites_entries_is_not_rescaled_as_times() -> None:
    suite = [{"options": SUITE_OPTIONS}, {"options": dict(SUITE_OPTIONS)}]
    assert unscaled(None, "seconds", suite) == ("", 1.0)
    assert unscaled(None, "seconds", [*suite, {"options": {"timer": "perf_counter"}}]) is None  # a timed entry
    assert unscaled(None, "operations", suite) is None

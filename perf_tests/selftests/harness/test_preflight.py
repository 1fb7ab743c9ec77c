"""What a run needs is checked at start (``session.preflight``): an unusable directory or a spec naming no real arm
stops the session before anything is measured, as a usage error (exit 4) naming the option and where its value
came from, also under --collect-only. A path that breaks while the run measures costs no measurement: the results
are kept, the verdict table is shown, and the session exits 1 saying what was not written (issue 28, cases 1, 5, 6).

In-process sessions on a test file that records one fake result: no engine, no producer, well under a second each.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
from pathlib import Path

import pytest

import engine_fixtures.report.html  # noqa: F401  imported once here: an in-process run drops what it imported

pytest_plugins = ("pytester",)

TEST_FILE = """
import os
import pathlib
import shutil
import pytest
from engine_fixtures.store.results import RunResult

@pytest.mark.perf
def test_demo(perf_record):
    spoil = os.environ.get("SPOIL")
    if spoil:  # a fault while the run measures: a directory it writes at its end becomes a regular file
        shutil.rmtree(spoil, ignore_errors=True)
        pathlib.Path(spoil).write_text("not a directory")
    perf_record(RunResult("demo/arm=a/c=4", {"arm": "a", "c": "4"}, {"latency_p50_ms": (100.0, 101.0, 99.0, 100.5)}))
"""


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_demo=TEST_FILE)
    (pytester.path / "a-file").write_text("a regular file, not a directory\n")
    return pytester


def run(p: pytest.Pytester, *args: str, history: bool = False) -> pytest.RunResult:
    """An in-process session; ``history``: the default run history (an SQLite file in the results dir)."""
    return p.runpytest_inprocess("-rs", "--perf-strict", "no", *([] if history else ["--perf-history-url", "none"]),
                                 "--perf-baseline-dir", str(p.path / "bl"), "--perf-results-dir", str(p.path / "out"),
                                 *args)


@pytest.mark.parametrize(("args", "message"), [
    (["--perf-results-dir", "{file}"], "Invalid --perf-results-dir '{file}' from command line --perf-results-dir: "
                                       "{file} exists and is not a directory"),
    (["--perf-results-dir", "{file}/out"], "{file}/out cannot be created: {file} is not a directory"),
    (["--perf-state-dir", "{file}", "--collect-only"], "Invalid --perf-state-dir '{file}' from command line "
                                                       "--perf-state-dir: {file} exists and is not a directory"),
    (["--perf-baseline-dir", "{file}", "--perf-update-baselines"], "Invalid --perf-baseline-dir '{file}' from "
                                                                   "command line --perf-baseline-dir: {file}/"),
    (["--perf-inject", "slow:nosuch=50"], "Invalid --perf-inject 'slow:nosuch=50' from command line --perf-inject: "
                                          "unknown arm 'nosuch'; the CPU tier's copy arms are torch, buffer, "
                                          "control, sglang"),
    (["--perf-inject", "copy:torch=nosuch"], "unknown copy implementation 'nosuch' (copy:torch=nosuch); the CPU "
                                             "tier's copy arms are torch, buffer, control, sglang"),
], ids=["results-file", "results-under-file", "state-file-collect-only", "baseline-file-update", "inject-slow-arm",
        "inject-copy-impl"])
def test_an_unusable_setting_stops_the_run_at_start_naming_the_option(
        suite: pytest.Pytester, args: list[str], message: str) -> None:
    file = str(suite.path / "a-file")
    r = run(suite, *(a.format(file=file) for a in args))
    assert r.ret == pytest.ExitCode.USAGE_ERROR, r.stdout.str() + r.stderr.str()
    text = r.stderr.str()
    assert message.format(file=file) in text, text
    assert "INTERNALERROR" not in text + r.stdout.str()
    assert "Traceback" not in text + r.stdout.str()
    assert not (suite.path / "out").exists()  # nothing measured, nothing written


def test_every_problem_is_named_in_one_error(suite: pytest.Pytester) -> None:
    file = str(suite.path / "a-file")
    r = run(suite, "--perf-results-dir", file, "--perf-state-dir", file, "--perf-inject", "slow:nosuch=5")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    text = r.stderr.str()
    assert all(f"Invalid --perf-{o}" in text for o in ("results-dir", "state-dir", "inject")), text


def fallback_dir(text: str) -> Path:
    (where,) = set(re.findall(r"this run's results are in (\S+?)/results-", text))
    return Path(where)


def test_a_results_dir_that_breaks_while_measuring_keeps_the_results_and_fails_the_session(
        suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPOIL", str(suite.path / "out"))
    (suite.path / "out").mkdir()
    r = run(suite)
    text = r.stdout.str()
    assert "Traceback" not in text + r.stderr.str()
    assert r.ret == pytest.ExitCode.TESTS_FAILED, text
    r.assert_outcomes(skipped=1)
    assert "perf summary" in text  # the verdict table and the skip reasons are still shown
    r.stdout.fnmatch_lines(["*SKIPPED*no baseline for 'demo/arm=a/c=4'*"])
    kept = fallback_dir(text)
    try:
        assert kept != suite.path / "out"
        (results,) = kept.glob("results-*.json")
        assert '"demo/arm=a/c=4"' in results.read_text()
        r.stdout.fnmatch_lines([f"*FAILED: the results dir {suite.path / 'out'} could not be written*"])
    finally:
        shutil.rmtree(kept, ignore_errors=True)


def test_a_baseline_dir_that_breaks_while_measuring_is_an_error_line_and_exit_1(
        suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPOIL", str(suite.path / "bl"))
    r = run(suite, "--perf-update-baselines")
    text = r.stdout.str()
    assert "Traceback" not in text + r.stderr.str()
    assert r.ret == pytest.ExitCode.TESTS_FAILED, text
    (results,) = (suite.path / "out").glob("results-*.json")  # written before the pool update was tried
    assert '"demo/arm=a/c=4"' in results.read_text()
    r.stdout.fnmatch_lines(["*FAILED: this run was not recorded in the baseline pools (--perf-update-baselines):*"])
    assert "FAILED: this run was not recorded" in (suite.path / "out" / "summary.md").read_text()


def test_a_state_dir_that_breaks_after_the_check_is_a_header_line_not_an_internal_error(tmp_path: Path) -> None:
    """The run guard itself, past the start-up check (a state dir replaced by a file in between): it says so."""
    from engine_fixtures.options import Settings
    from engine_fixtures.session.run_guard import RunGuard

    (tmp_path / "state").write_text("a regular file\n")
    guard = RunGuard(None, Settings(state_dir=tmp_path / "state", results_dir=tmp_path / "out"))  # type: ignore[arg-type]
    guard.start()
    assert guard.record is None
    assert any("no machine state in" in line and "--perf-state-dir" in line for line in guard.lines()), guard.lines()


@pytest.mark.parametrize(("name", "message"), [
    ("out\udcff", "{dir}/out\\xff holds bytes that are not UTF-8; rename it or pass another path"),
    ("x" * 300, "cannot be used: File name too long"),
    ("/".join(["y" * 250] * 17), "is too long: "),
    ("loop", "{dir}/loop is a symbolic link that leads nowhere (a loop, or its target is missing)"),
    ("loop/out", "{dir}/loop/out cannot be created: {dir}/loop is a symbolic link that leads nowhere"),
], ids=["not-utf8", "name-too-long", "path-too-long", "symlink-loop", "under-symlink-loop"])
def test_a_results_dir_that_could_not_be_written_is_refused_at_start(
        suite: pytest.Pytester, name: str, message: str) -> None:
    """Issue 37, case 1: a name that is not UTF-8 was accepted, measured, then its history row, summary and report
    were lost to a traceback (and its JSON's path could never be imported); a name too long was an INTERNALERROR."""
    (suite.path / "loop").symlink_to(suite.path / "loop")
    r = run(suite, "--perf-results-dir", f"{suite.path}/{name}", history=True)
    text = r.stdout.str() + r.stderr.str()
    assert r.ret == pytest.ExitCode.USAGE_ERROR, text
    assert "Invalid --perf-results-dir" in text
    assert message.format(dir=suite.path) in text, text
    assert "INTERNALERROR" not in text
    assert "Traceback" not in text
    assert {p.name for p in suite.path.iterdir()} - {".benchmarks"} == {"a-file", "loop", "test_demo.py"}  # no file


def test_a_results_dir_with_odd_characters_gets_every_file(suite: pytest.Pytester) -> None:
    """Spaces, %, ?, #, @, :, a newline and a tab in its name: results, history, summary, report and the
    pytest-benchmark export are written."""
    out = suite.path / "out dir %s%%2F ?x=1 #f @h:1\n\t"
    r = run(suite, "--perf-results-dir", str(out), history=True)
    assert r.ret == pytest.ExitCode.OK, r.stdout.str()
    assert "FAILED" not in r.stdout.str()
    (results,) = out.glob("results-*.json")
    export = f"0001_benchmark_{results.stem.removeprefix('results-')}.json"
    assert sorted(p.name for p in out.iterdir()) == [
        export, "history.sqlite", "report.html", results.name, "summary.md"]
    with sqlite3.connect(out / "history.sqlite") as db:
        assert db.execute("SELECT count(*) FROM runs").fetchone() == (1,)


def test_a_history_step_that_raises_any_error_keeps_the_summary_and_report(
        suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """A driver's own error (here the text it could not encode, as a lone surrogate was) is a FAILED line naming
    the import command; the summary and the report are still written."""
    from engine_fixtures.store.history import HistoryStore

    def append(*_args: object, **_kwargs: object) -> None:
        raise UnicodeEncodeError("utf-8", "\udcff", 0, 1, "surrogates not allowed")

    monkeypatch.setattr(HistoryStore, "append", append)
    r = run(suite, history=True)
    text = r.stdout.str()
    assert r.ret == pytest.ExitCode.TESTS_FAILED, text
    assert "Traceback" not in text + r.stderr.str()
    (results,) = (suite.path / "out").glob("results-*.json")
    r.stdout.fnmatch_lines([f"*FAILED: run history not written: UnicodeEncodeError: *perf-baseline import {results}*"])
    assert (suite.path / "out" / "summary.md").exists()
    assert (suite.path / "out" / "report.html").exists()


@pytest.mark.parametrize(("parent", "problem"), [
    ("plain", "{dir}/plain is not a cgroup directory (it holds neither cgroup.controllers (v2) nor cpu.cfs_quota_us"),
    ("missing", "{dir}/missing does not exist"),
    ("a-file", "{dir}/a-file is not a directory"),
], ids=["plain-dir", "missing", "file"])
def test_a_cgroup_parent_that_is_no_cgroup_is_one_usage_error_leaving_nothing(
        suite: pytest.Pytester, parent: str, problem: str) -> None:
    """Issue 37, case 2: a plain directory gave an INTERNALERROR and kept a ``perf-probe-*`` directory of quota files;
    a missing one was the last line of a 60-line INTERNALERROR."""
    suite.makepyfile(test_cg="import pytest\n\n@pytest.mark.cgroup\ndef test_cg(cpu_quota_factory):\n    pass\n")
    (suite.path / "plain").mkdir()
    r = run(suite, "--perf-cgroup-parent", str(suite.path / parent))
    assert r.ret == pytest.ExitCode.USAGE_ERROR, r.stdout.str() + r.stderr.str()
    (line,) = [x for x in r.stderr.str().splitlines() if x.strip()]
    assert line.startswith(f"ERROR: Invalid --perf-cgroup-parent '{suite.path / parent}' from command line "
                           f"--perf-cgroup-parent: {problem.format(dir=suite.path)}"), line
    assert "pass a cgroup directory (e.g. --perf-cgroup-parent /sys/fs/cgroup/<path>) or drop the option" in line
    assert "INTERNALERROR" not in r.stdout.str()
    assert list((suite.path / "plain").iterdir()) == []
    assert not (suite.path / "out").exists()


def test_a_pool_recorded_for_another_machine_key_is_said_and_not_judged(tmp_path: Path) -> None:
    """Issue 37, case 6: a pool whose ``machine_key`` is not its folder's (a file copied by hand from another key's
    folder: another quota, another GPU count) judged this machine without comment. It is read like an unreadable
    pool: said once at start and in the summary, its rows not judged, this run never added to it."""
    from engine_fixtures.machine import MachineInfo
    from engine_fixtures.options import Settings
    from engine_fixtures.session.perf_session import PerfSession
    from engine_fixtures.store.baselines import Baseline, BaselineRun, BaselineStore, MissingBaseline

    machine = MachineInfo.collect().as_dict()
    session = PerfSession(Settings(baseline_dir=tmp_path), "cpu-here", machine)
    runs = tuple(BaselineRun(f"r{i}", "2026-12-01", {"latency_p50_ms": (100.0 + i, 101.0, 99.0)}) for i in range(3))
    there = BaselineStore(tmp_path, "cpu-there", session.store.host)
    written = there.write(Baseline("demo/arm=a", {"arm": "a"}, "cpu-there", runs, {}, session.store.host))
    session.store.path_for("demo/arm=a").parent.mkdir(parents=True)
    shutil.copy(written, session.store.path_for("demo/arm=a"))  # as a hand copy between folders does
    base = session.pool("demo/arm=a")
    assert isinstance(base, MissingBaseline)
    assert base.unreadable is not None
    assert "was recorded for machine key 'cpu-there' but lies in the folder of 'cpu-here'" in base.unreadable
    assert f"move it to {tmp_path / 'cpu-there'}/" in base.unreadable
    assert any("cpu-there" in note for note in session.notes())

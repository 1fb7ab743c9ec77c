"""A pytest session appends its run to the history after its results JSON (both back ends). A bad URL, an unusable
SQLite file or an unreachable server stops the run at start, naming the option; a history that breaks while the run
measures costs the index, never the JSON, and the session exits 1 (issue 28, case 4)."""

from __future__ import annotations

import contextlib
import gc
import json
import subprocess
import time
from pathlib import Path

import pytest

from engine_fixtures.cli import main
from engine_fixtures.store.history import HistoryError, HistoryStore
from engine_fixtures.store.history_db import resolve_url, shown

pytest_plugins = ("pytester",)

TEST_FILE = """
import os
import pytest
from engine_fixtures.store.results import RunResult

RUN = int(os.environ.get("RUN", "0"))

@pytest.mark.perf
def test_demo(perf_record):
    level = 100.0 + RUN
    if os.environ.get("SPOIL_HISTORY"):  # a fault while the run measures: the history file is overwritten
        with open(os.environ["SPOIL_HISTORY"], "w") as fh:
            fh.write("not a database any more")
    perf_record(RunResult("demo/arm=a/c=4", {"arm": "a", "c": "4"},
                          {"latency_p50_ms": (level, level * 1.01, level * 0.99, level * 1.005)}))
"""

UNREACHABLE = "postgresql://perf:s3cret-pw@127.0.0.1:1/perf"  # port 1: refused at once, nothing listens


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_demo=TEST_FILE)
    return pytester


def run(p: pytest.Pytester, *args: str) -> pytest.RunResult:
    return p.runpytest("-rs", "--perf-strict", "no", "--perf-baseline-dir", str(p.path / "bl"),
                       "--perf-results-dir", str(p.path / "out"), *args)


def test_each_run_lands_in_the_history_with_its_runner_and_the_report_draws_the_trend(
        suite: pytest.Pytester, history_url: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("RUNNER_NAME", "gpu-runner-7")
    for i in (1, 2):
        monkeypatch.setenv("RUN", str(i))
        r = run(suite, "--perf-history-url", history_url, "--perf-runner-labels", "h200, rack-3")
        r.assert_outcomes(skipped=1)
        r.stdout.fnmatch_lines(["*run history: appended to *"])
    results = sorted((suite.path / "out").glob("results-*.json"))
    assert len(results) == 2
    assert json.loads(results[0].read_text())["runner"] == {"name": "gpu-runner-7", "labels": ["h200", "rack-3"]}
    with HistoryStore.open(history_url, suite.path) as store:
        runs = store.runs(label="rack-3")
        assert [r.runner for r in runs] == ["gpu-runner-7", "gpu-runner-7"]
        assert {Path(r.source) for r in runs} == set(results)  # two runs in one second: two files
        ((_, points),) = store.series("demo/*", "latency_p50_ms").items()
    assert [p.values[0] for p in points] == [101.0, 102.0]
    assert [p.status for p in points] == ["no-baseline", "no-baseline"]
    assert "trend of demo/arm=a/c=4 over the run history" in (suite.path / "out" / "report.html").read_text()
    assert main(["runs", "--history-url", history_url, "--runner", "gpu-runner-7", "--scenario", "demo/*"]) == 0
    out = capsys.readouterr().out
    assert "runner gpu-runner-7 [h200,rack-3]  1 scenario(s)" in out
    assert out.rstrip().endswith("2 run(s)")


def test_the_default_history_is_an_sqlite_file_next_to_the_results(suite: pytest.Pytester) -> None:
    run(suite).assert_outcomes(skipped=1)
    with HistoryStore.open(None, suite.path / "out") as store:
        assert store.count() == 1
    run(suite, "--perf-history-url", "none").assert_outcomes(skipped=1)
    with HistoryStore.open(None, suite.path / "out") as store:
        assert store.count() == 1
    assert len(list((suite.path / "out").glob("results-*.json"))) == 2


@pytest.mark.parametrize(("url", "message"), [
    (UNREACHABLE, "cannot open the run history at postgresql+psycopg://perf:***@127.0.0.1:1/perf "
                  "(--perf-history-url (PERF_HISTORY_URL)): OperationalError"),
    ("mysql://perf:s3cret-pw@db/perf", "Invalid --perf-history-url (PERF_HISTORY_URL) "
                                       "'mysql://perf:***@db/perf': mysql is not supported"),
    ("foo://bar", "Invalid --perf-history-url (PERF_HISTORY_URL) 'foo://bar': foo is not supported"),
    ("sqlite:///{path}/garbage.sqlite", "{path}/garbage.sqlite is not an SQLite database"),
    ("sqlite:///{path}/a-file/history.sqlite", "{path}/a-file/history.sqlite cannot be created: {path}/a-file "
                                               "is not a directory"),
], ids=["server-down", "unknown-scheme", "no-scheme", "garbage-sqlite", "sqlite-under-a-file"])
def test_a_history_that_cannot_be_written_stops_the_run_before_it_measures(
        suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, url: str, message: str) -> None:
    (suite.path / "garbage.sqlite").write_text("this is not a database\n")
    (suite.path / "a-file").write_text("a regular file\n")
    monkeypatch.setenv("PERF_HISTORY_URL", url.format(path=suite.path))
    start = time.perf_counter()
    r = run(suite)
    assert time.perf_counter() - start < 60
    assert r.ret == pytest.ExitCode.USAGE_ERROR, r.stdout.str()
    text = r.stderr.str()
    assert message.format(path=suite.path) in text, text
    assert "(set by PERF_HISTORY_URL environment variable)" in text
    assert "s3cret-pw" not in text + r.stdout.str()
    assert "Traceback" not in text + r.stdout.str()
    assert not list((suite.path / "out").glob("results-*.json"))  # nothing measured
    if "sqlite" in url:  # an SQLite history's fix speaks of its file, never of a server, user or password
        assert "server" not in text, text
        assert "password" not in text, text


def test_a_read_only_location_for_the_sqlite_history_stops_the_run_at_start(
        suite: pytest.Pytester, small_tmpfs, monkeypatch: pytest.MonkeyPatch) -> None:
    where = small_tmpfs("ro", "1m")
    subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True, timeout=30)
    monkeypatch.setenv("PERF_HISTORY_URL", f"sqlite:///{where}/history.sqlite")
    r = run(suite)
    assert r.ret == pytest.ExitCode.USAGE_ERROR, r.stdout.str()
    assert f"{where}/history.sqlite cannot be created: {where} is not writable" in r.stderr.str()


def test_a_history_that_breaks_while_measuring_keeps_the_json_and_fails_the_session(
        suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """The history opened at start, then its file was overwritten during the run: the JSON is written, the error
    names the file and the import command, and the session exits 1 (a lost index is not a green run)."""
    history = suite.path / "history.sqlite"
    monkeypatch.setenv("SPOIL_HISTORY", str(history))
    r = run(suite, "--perf-history-url", f"sqlite:///{history}")
    r.assert_outcomes(skipped=1)
    assert r.ret == pytest.ExitCode.TESTS_FAILED, r.stdout.str()
    (results,) = (suite.path / "out").glob("results-*.json")
    assert json.loads(results.read_text())["results"][0]["scenario"] == "demo/arm=a/c=4"
    text = r.stdout.str()
    assert f"FAILED: run history not written: {history} is not an SQLite database" in text
    assert f"perf-baseline import {results}" in text
    assert "server" not in text.split("FAILED: run history not written")[1].splitlines()[0]
    assert "FAILED: run history not written" in (suite.path / "out" / "summary.md").read_text()


def test_the_library_error_names_the_option_without_the_password(tmp_path: Path) -> None:
    with pytest.raises(HistoryError, match=r"127\.0\.0\.1:1.*PERF_HISTORY_URL.*server is running") as info:
        HistoryStore.open(UNREACHABLE, tmp_path)
    assert "s3cret-pw" not in str(info.value)
    assert shown(resolve_url(UNREACHABLE, tmp_path)) == "postgresql+psycopg://perf:***@127.0.0.1:1/perf"
    with pytest.raises(HistoryError, match="'not a url': not a database URL"):
        HistoryStore.open("not a url", tmp_path)
    with pytest.raises(HistoryError, match="in-memory"):
        HistoryStore.open("sqlite://", tmp_path)
    with pytest.raises(HistoryError, match="no run history at"):
        HistoryStore.open(None, tmp_path / "nothing-here", create=False)
    assert HistoryStore.open("none", tmp_path) is None


def test_an_sqlite_history_error_speaks_of_the_file_not_of_a_server(tmp_path: Path) -> None:
    """Each way an SQLite file fails names the file and the fix for a file; the server/user/password hint is for
    PostgreSQL only (issue 28, case 4)."""
    (tmp_path / "garbage.sqlite").write_text("this is not a database\n")
    (tmp_path / "a-file").write_text("a regular file\n")
    (tmp_path / "a-dir.sqlite").mkdir()
    for name, expected in [("garbage.sqlite", "garbage.sqlite is not an SQLite database this suite can read"),
                           ("a-file/history.sqlite", "a-file/history.sqlite cannot be created: "
                                                     f"{tmp_path}/a-file is not a directory"),
                           ("a-dir.sqlite", "a-dir.sqlite exists and is not a file")]:
        with pytest.raises(HistoryError) as info:
            HistoryStore.open(f"sqlite:///{tmp_path / name}", tmp_path)
        assert expected in str(info.value)
        assert "sqlite:///PATH" in str(info.value)
        assert "server" not in str(info.value)
        assert "password" not in str(info.value)


def test_a_full_disk_leaves_no_empty_history_file(small_tmpfs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Issue 37, case 6: the first write of a new SQLite history failed on a full disk and left a 0-byte
    history.sqlite behind; it is removed (a file that was there stays), and the error says the disk is full."""
    disk = small_tmpfs("disk", "256k")
    with open(disk / "fill", "wb", buffering=0) as fh, contextlib.suppress(OSError):  # to its last block: ENOSPC
        while True:
            fh.write(b"\0" * 4096)
    with pytest.raises(HistoryError, match=r"history\.sqlite .*database or disk is full; free space there"):
        HistoryStore.open(f"sqlite:///{disk}/history.sqlite", tmp_path)
    assert sorted(p.name for p in disk.iterdir()) == ["fill"]
    gc.collect()  # the driver's connection that failed in its connect hook is closed with its traceback's frames

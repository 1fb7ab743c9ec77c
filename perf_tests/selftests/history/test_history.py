"""The run history on both back ends (an SQLite file and a real PostgreSQL server), one module for both.

Round trips are exact, re-imports change nothing, the queries the fleet asks answer, eight concurrent writers
lose nothing, a writer killed inside its transaction leaves no trace, and a store of another schema revision is
refused with the command that migrates it.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from engine_fixtures.cli import main
from engine_fixtures.store.history import HistoryError, HistoryStore, parse_date
from engine_fixtures.store.history_db import resolve_url
from engine_fixtures.store.history_schema import metadata
from engine_fixtures.store.results import ResultsFile
from perf_tests.selftests.history.writer import make_run
from perf_tests.selftests.judge.test_cli import assert_names_the_scenario_with_no_clean_run, mixed_runs

ROOT = Path(__file__).resolve().parents[3]
COMMITTED = ROOT / "docs" / "results"
GOLDEN = ROOT / "perf_tests" / "selftests" / "judge" / "golden"
WRITERS, RUNS_EACH = 8, 50
TABLES = ("runs", "run_labels", "results", "metrics", "samples")


def open_store(url: str, tmp_path: Path) -> HistoryStore:
    store = HistoryStore.open(url, tmp_path)
    assert store is not None
    return store


def counts(store: HistoryStore) -> dict[str, int]:
    with store.engine.connect() as conn:
        return {t: conn.execute(sa.select(sa.func.count()).select_from(sa.table(t))).scalar_one() for t in TABLES}


def test_committed_results_of_both_formats_round_trip_exactly(history_url: str, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    # every committed results file (both formats; the rest of docs/results is study output and pooled baselines)
    files = [ResultsFile.load(p) for p in sorted(COMMITTED.rglob("*results*.json"))]
    files.append(ResultsFile.load(GOLDEN / "results_v1.json"))
    assert len(files) >= 12
    assert main(["import", str(COMMITTED), str(GOLDEN / "results_v1.json"), "--history-url", history_url]) == 0
    out = capsys.readouterr().out
    assert f"imported {len(files)} run(s)" in out
    assert "ab_study.json: not a results file" in out
    assert main(["import", str(COMMITTED), "--history-url", history_url]) == 0
    assert "imported 0 run(s)" in capsys.readouterr().out  # a run already stored is left as it is
    with open_store(history_url, tmp_path) as store:
        assert store.count() == len(files)
        back = {rf.run_id: rf for rf in store.load([f.run_id for f in files])}
        for rf in files:
            assert back[rf.run_id] == rf  # samples, warmup, metadata, verdicts, versions: exactly as written
        formats = {r.run_id: r.source for r in store.runs()}
    assert all(Path(formats[f.run_id]).is_file() for f in files)


def test_a_per_segment_value_is_stored_under_its_windows_index(history_url: str, tmp_path: Path) -> None:
    """A per-segment metric (one value per segment, on its first window) keeps the index of its window, and the
    result reads back exactly, its sample_windows with it."""
    from dataclasses import replace

    from engine_fixtures.store.results import RunResult

    rf = make_run(1, 1)
    r = rf.results[0]
    sparse = RunResult(r.scenario, r.arm, {**r.samples, "running_requests_max": (16.0, 15.0)}, r.warmup,
                       {**r.metadata, "sample_windows": {"running_requests_max": [0, 3]}})
    rf = replace(rf, results=(sparse, *rf.results[1:]))
    with open_store(history_url, tmp_path) as store:
        assert store.append(rf)
        (back,) = store.load([rf.run_id])
        assert back == rf
        assert back.results[0].windows_of("running_requests_max") == (0, 3)
        with store.engine.connect() as conn:
            stored = conn.execute(sa.text("SELECT s.window_index FROM samples s JOIN metrics m ON s.metric_pk = m.id "
                                          "WHERE m.name = 'running_requests_max' ORDER BY s.window_index")).all()
        assert [i for (i,) in stored] == [0, 3]


def test_the_fleet_questions_are_queries(history_url: str, tmp_path: Path) -> None:
    with open_store(history_url, tmp_path) as store:
        for w in (1, 2):
            for i in range(10):
                assert store.append(make_run(w, i))
        other = make_run(3, 0, machine_key="other-box")
        store.append(other)
        assert len(store.runs()) == 21
        assert [r.runner for r in store.runs(label="w2")] == ["runner-2"] * 10
        week = store.runs(runner="runner-1", since=parse_date(make_run(1, 5).date))
        assert [r.run_id for r in week] == [make_run(1, i).run_id for i in range(5, 10)]
        assert {r.machine_key for r in store.runs(machine_key="other-box")} == {"other-box"}
        series = store.series("engine/*copy=buffer*", "ttft_p50_ms", machine_key="fleet-box")
        ((key, points),) = series.items()
        assert key == ("fleet-box", "engine/transport=cpu/copy=buffer/c=16", "ttft_p50_ms")
        assert [p.run_id for p in points] == [make_run(w, i).run_id for w in (1, 2) for i in range(10)]
        assert points[3].status == "regression"
        assert points[3].values == make_run(1, 3).results[0].samples["ttft_p50_ms"]
        clean = store.clean_candidates("fleet-box", 3, "engine/*copy=torch*")
        # runs 1/i with i % 7 == 3 were judged regression; the newest three clean runs are writer 2's 7, 8, 9
        assert clean == {"engine/transport=cpu/copy=torch/c=16": [make_run(2, i).run_id for i in (7, 8, 9)]}


def test_update_from_runs_pools_the_newest_clean_runs_of_the_store(history_url: str, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    with open_store(history_url, tmp_path) as store:
        for i in range(11):
            store.append(make_run(1, i))
        store.append(ResultsFile(make_run(1, 20).results, "fleet-box", date=make_run(1, 20).date,
                                 run_id="injected", injection="slow:torch=6"))
    bl = tmp_path / "bl"
    assert main(["update", "--from-runs", "3", "--machine", "fleet-box", "--history-url", history_url,
                 "--baseline-dir", str(bl), "--scenario", "*copy=buffer*"]) == 0
    out = capsys.readouterr().out
    assert "the newest 3 clean run(s) of fleet-box in the run history at" in out
    # runs 3 and 10 were judged regression (i % 7 == 3) and one run is injected: the newest clean are 7, 8, 9
    expected = ", ".join(make_run(1, i).run_id for i in (7, 8, 9))
    assert f"engine/transport=cpu/copy=buffer/c=16: pooling {expected}" in out
    pool = json.loads(next((bl / "fleet-box").glob("*.json")).read_text())
    assert [r["run_id"] for r in pool["runs"]] == [make_run(1, i).run_id for i in (7, 8, 9)]
    assert main(["update", "--from-runs", "3", "--machine", "fleet-box", "--history-url", history_url,  # run 10 too
                 "--baseline-dir", str(bl), "--scenario", "*copy=buffer*", "--accept", "looked at run 10"]) == 0
    expected = ", ".join(make_run(1, i).run_id for i in (8, 9, 10))
    assert f"engine/transport=cpu/copy=buffer/c=16: pooling {expected}" in capsys.readouterr().out


def test_update_from_runs_names_a_scenario_of_the_store_with_no_clean_run(history_url: str, tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Before (issue 37): the history gave no candidate of other/c=8, so it was not named, and the command exited 0."""
    with open_store(history_url, tmp_path) as store:
        for rf in mixed_runs():
            store.append(rf)
    code = main(["update", "--from-runs", "3", "--machine", "m1", "--history-url", history_url, "--baseline-dir",
                 str(tmp_path / "bl")])
    assert_names_the_scenario_with_no_clean_run(code, *capsys.readouterr())


def test_history_shows_the_change_and_draws_it(history_url: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    with open_store(history_url, tmp_path) as store:
        for i in range(16):
            rf = make_run(1, i)
            slow = 1.25 if i >= 10 else 1.0  # TTFT 25 % worse from run 11 on
            results = tuple(type(r)(r.scenario, r.arm, {**r.samples, "ttft_p50_ms": tuple(
                v * slow * (1 + 0.01 * ((i * 7 + w) % 5 - 2)) for w, v in enumerate(r.samples["ttft_p50_ms"]))},
                r.warmup, r.metadata) for r in rf.results)
            store.append(ResultsFile(results, rf.machine_key, date=rf.date, run_id=rf.run_id, verdicts=rf.verdicts))
    png = tmp_path / "ttft.png"
    code = main(["history", "engine/*copy=buffer*", "--metric", "ttft_p50_ms", "--history-url", history_url,
                 "--png", str(png)])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "change at run 11" in out
    assert "(+25." in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 20_000


def test_eight_concurrent_writers_lose_nothing(history_url: str, tmp_path: Path) -> None:
    fresh = history_url  # an empty database: the eight also race to create the schema
    start = time.perf_counter()
    writer = "perf_tests.selftests.history.writer"
    procs = [subprocess.Popen([sys.executable, "-m", writer, fresh, str(w), str(RUNS_EACH)],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for w in range(WRITERS)]
    outs = [p.communicate(timeout=300) for p in procs]
    elapsed = time.perf_counter() - start
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
        assert out.strip().endswith(f"added {RUNS_EACH}"), out
    with open_store(fresh, tmp_path) as store:
        expected = [make_run(w, i) for w in range(WRITERS) for i in range(RUNS_EACH)]
        assert store.count() == len(expected)
        back = {rf.run_id: rf for rf in store.load([rf.run_id for rf in expected])}
        lost = [rf.run_id for rf in expected if back.get(rf.run_id) != rf]
        rows = counts(store)
    print(f"\n{history_url.split(':')[0]}: {WRITERS} writers x {RUNS_EACH} runs: {len(back)} runs readable, "
          f"{len(lost)} lost or altered, {rows['samples']} sample rows, {elapsed:.1f} s wall")
    assert lost == []
    assert rows["samples"] == len(expected) * 2 * (4 * 5 + 1)


@pytest.mark.parametrize("at", ["samples", "commit"])
def test_a_writer_killed_inside_its_transaction_leaves_no_partial_run(history_url: str, tmp_path: Path,
                                                                      at: str) -> None:
    with open_store(history_url, tmp_path) as store:
        store.append(make_run(5, 1))
        before = counts(store)
        victim = subprocess.Popen([sys.executable, "-m", "perf_tests.selftests.history.writer", history_url, "9", "1",
                                   "--pause-at", at], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        try:
            with selectors.DefaultSelector() as sel:
                sel.register(victim.stdout, selectors.EVENT_READ)
                assert sel.select(timeout=120), "the writer never reached its transaction"
            assert victim.stdout.readline().strip() == "paused", victim.stderr.read()
            os.kill(victim.pid, signal.SIGKILL)
            assert victim.wait(timeout=30) == -signal.SIGKILL
        finally:
            if victim.poll() is None:
                victim.kill()
            victim.wait(timeout=30)
            for stream in (victim.stdin, victim.stdout, victim.stderr):
                stream.close()
        assert counts(store) == before  # no run row, no orphaned result, metric or sample rows
        killed = make_run(9, 0)
        with pytest.raises(HistoryError, match="not in the history"):
            store.load([killed.run_id])
        start = time.perf_counter()
        assert store.append(killed)  # the dead writer holds no lock: the same run goes in whole
        print(f"\n{history_url.split(':')[0]}: writer killed at {at}: 0 partial rows; the same run appended "
              f"{time.perf_counter() - start:.2f} s later")
        assert store.load([killed.run_id]) == [killed]


def test_a_store_of_another_schema_revision_is_refused_with_the_command(history_url: str, tmp_path: Path) -> None:
    open_store(history_url, tmp_path).close()
    engine = sa.create_engine(resolve_url(history_url, tmp_path))
    version = sa.table("alembic_version", sa.column("version_num"))
    with engine.begin() as conn:
        conn.execute(version.update().values(version_num="9999_from_the_future"))
    with pytest.raises(HistoryError, match=r"9999_from_the_future.*does not know.*perf-baseline migrate --history"):
        HistoryStore.open(history_url, tmp_path)
    assert main(["runs", "--history-url", history_url]) == 2
    with engine.begin() as conn:
        conn.execute(sa.schema.DropTable(sa.Table("alembic_version", sa.MetaData())))
    with pytest.raises(HistoryError, match="no schema revision"):
        HistoryStore.open(history_url, tmp_path)
    engine.dispose()


def test_the_migrations_build_exactly_the_declared_schema(history_url: str, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["migrate", "--history", "--history-url", history_url]) == 0
    assert "run history at schema revision 0001 (was empty)" in capsys.readouterr().out
    engine = sa.create_engine(resolve_url(history_url, tmp_path))
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
    engine.dispose()
    assert diff == []

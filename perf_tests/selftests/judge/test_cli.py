"""perf-baseline CLI: update/compare/show/migrate/history on real files, user errors exit 2."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from engine_fixtures.cli import main
from engine_fixtures.judge.changepoint import detect
from engine_fixtures.machine import HostIdentity, MachineInfo
from engine_fixtures.store.results import ResultsFile, RunResult

HOST = HostIdentity(("GPU-aaaa",), "Intel(R) Xeon(R) Processor", None, "6.8.0", "h200-a")
OTHER = HostIdentity(("GPU-bbbb",), "Intel(R) Xeon(R) Processor", None, "6.8.0", "h200-b")


def results_file(tmp: Path, name: str, latency: list[float], date: str = "2025-01-01T00:00:00+00:00",
                 verdict: str | None = None, injection: str = "", key: str = "m1",
                 host: HostIdentity = HOST) -> Path:
    r = RunResult("demo/c=4", {"c": "4"}, {"latency_p50_ms": tuple(latency)})
    path = tmp / f"results-{name}.json"
    verdicts = {"demo/c=4": {"latency_p50_ms": verdict}} if verdict else {}
    path.write_text(ResultsFile((r,), key, {"host": host.to_json()}, date=date, run_id=f"{key}@{name}",
                                verdicts=verdicts, injection=injection).dumps())
    return path


def noisy(level: float, seed: int, n: int = 5) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(level * (1 + 0.01 * rng.standard_normal()) * (1 + 0.01 * rng.standard_normal(n)))


def test_update_compare_show_migrate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bl = str(tmp_path / "bl")
    runs = [results_file(tmp_path, f"a{i}", noisy(10.0, i), date=f"2025-01-0{i}T00:00:00+00:00") for i in (1, 2, 3)]
    assert main(["update", "--from", *map(str, runs), "--baseline-dir", bl, "--dry-run"]) == 0
    assert "runs 0 -> 3" in capsys.readouterr().out
    assert not (tmp_path / "bl").exists()
    assert main(["update", "--from", str(runs[0]), "--baseline-dir", bl, "--scenario", "other/*"]) == 0
    assert not (tmp_path / "bl").exists()
    assert main(["update", "--from", *map(str, runs), "--baseline-dir", bl]) == 0
    assert (tmp_path / "bl" / "m1" / "demo%2Fc=4.json").is_file()
    capsys.readouterr()
    same = results_file(tmp_path, "b", noisy(10.0, 9), date="2025-01-05T00:00:00+00:00")
    assert main(["compare", str(same), "--baseline-dir", bl]) == 0
    slow = results_file(tmp_path, "c", noisy(13.0, 10), date="2025-01-06T00:00:00+00:00")
    assert main(["compare", str(slow), "--baseline-dir", bl, "--markdown"]) == 1
    assert "| demo/c=4 | c=4 | latency_p50_ms | 12.82 ms | 10.07 | +27.4% | 6.6% | 3 runs | regression |" in (
        capsys.readouterr().out)
    assert main(["show", "--baseline-dir", bl]) == 0
    out = capsys.readouterr().out
    assert "demo/c=4: 3 run(s) 2025-01-01..2025-01-03" in out
    assert "host h200-a (GPU-aaaa; Intel(R) Xeon(R) Processor, max clock unknown; kernel 6.8.0): judges nothing here" \
        in out  # this test box is not h200-a
    assert "latency_p50_ms = 10" in out
    assert main(["migrate", "--baseline-dir", bl]) == 0
    assert capsys.readouterr().out == ""


def test_compare_never_judges_another_hosts_run_and_show_says_which_host_judges(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bl = str(tmp_path / "bl")
    here = MachineInfo.collect()
    runs = [results_file(tmp_path, f"a{i}", noisy(10.0, i), date=f"2025-01-0{i}T00:00:00+00:00", key=here.key,
                         host=here.host) for i in (1, 2, 3)]
    assert main(["update", "--from", *map(str, runs), "--baseline-dir", bl]) == 0
    capsys.readouterr()
    assert main(["show", "--baseline-dir", bl]) == 0
    assert f"host {here.host.describe()}: judges this host" in capsys.readouterr().out
    slow = results_file(tmp_path, "c", noisy(13.0, 10), date="2025-01-06T00:00:00+00:00", key=here.key, host=OTHER)
    assert main(["compare", str(slow), "--baseline-dir", bl]) == 0  # another host: nothing to judge it by
    assert "no-baseline" in capsys.readouterr().out
    same = results_file(tmp_path, "d", noisy(13.0, 10), date="2025-01-06T00:00:00+00:00", key=here.key,
                        host=here.host)
    assert main(["compare", str(same), "--baseline-dir", bl]) == 1
    assert "regression" in capsys.readouterr().out


def test_update_from_runs_pools_the_newest_clean_runs_and_refuses_regressions(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    res, bl = tmp_path / "res", str(tmp_path / "bl")
    res.mkdir()
    for i in range(1, 6):
        results_file(res, f"r{i}", noisy(10.0, i), date=f"2025-01-0{i}T00:00:00+00:00", verdict="pass")
    results_file(res, "r6", noisy(14.0, 6), date="2025-01-06T00:00:00+00:00", verdict="regression")
    results_file(res, "r7", noisy(14.0, 7), date="2025-01-07T00:00:00+00:00", injection="slow:torch=6")
    assert main(["update", "--from-runs", "3", "--from", str(res), "--machine", "m1", "--baseline-dir", bl]) == 0
    out = capsys.readouterr().out
    assert "demo/c=4: pooling m1@r3, m1@r4, m1@r5" in out
    assert main(["update", "--from", str(res / "results-r6.json"), "--baseline-dir", bl]) == 0
    assert "refused m1@r6: demo/c=4 was judged regression" in capsys.readouterr().out
    assert main(["update", "--from", str(res / "results-r6.json"), "--baseline-dir", bl, "--accept", "known"]) == 0
    assert "+1 run(s) m1@r6" in capsys.readouterr().out
    assert main(["update", "--from-runs", "9", "--from", str(res), "--machine", "m1", "--baseline-dir", bl]) == 2
    out, err = capsys.readouterr()
    assert "demo/c=4: found 5 clean run(s) of the 9 asked; not pooled" in out
    assert "--from-runs 9: 1 scenario(s) have fewer clean runs than asked" in err
    assert "demo/c=4 (5 of 9). Run the suite 4 more time(s)" in err
    assert "or pool what there is with --from-runs 5" in err


def test_update_from_runs_refuses_runs_whose_invariant_was_inconclusive_unless_accepted(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bl = str(tmp_path / "bl")
    for i in (1, 2, 3):
        path = results_file(tmp_path, f"r{i}", noisy(10.0, i), date=f"2025-01-0{i}T00:00:00+00:00", verdict="pass")
        data = json.loads(path.read_text())
        data["verdicts"]["demo/c=4"]["requests_per_s ratio buffer >= torch"] = "inconclusive"
        path.write_text(json.dumps(data))
    args = ["update", "--from-runs", "3", "--from", str(tmp_path), "--machine", "m1", "--baseline-dir", bl]
    assert main(args) == 2
    assert "runs judged regression or inconclusive need --accept REASON" in capsys.readouterr().err
    assert not (tmp_path / "bl").exists()
    assert main([*args, "--accept", "a noisy box, looked at"]) == 0
    assert "demo/c=4: pooling m1@r1, m1@r2, m1@r3" in capsys.readouterr().out
    pool = json.loads((tmp_path / "bl" / "m1" / "demo%2Fc=4.json").read_text())
    assert {r["accepted"] for r in pool["runs"]} == {"a noisy box, looked at"}


def test_update_from_runs_needs_a_positive_k_and_show_a_baseline_dir_that_exists(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results_file(tmp_path, "r1", noisy(10.0, 1), verdict="pass")
    for k in ("0", "-1"):
        with pytest.raises(SystemExit) as usage:
            main(["update", "--from-runs", k, "--from", str(tmp_path), "--machine", "m1"])
        assert usage.value.code == 2
        assert f"argument --from-runs: must be >= 1, got {k}" in capsys.readouterr().err
    assert main(["show", "--baseline-dir", str(tmp_path / "nonexistent")]) == 2
    assert f"there is no baseline directory {tmp_path / 'nonexistent'} (--baseline-dir" in capsys.readouterr().err
    assert main(["show", "--baseline-dir", str(tmp_path), "--machine", "m9"]) == 2
    assert "no pools of machine key m9" in capsys.readouterr().err


@pytest.mark.parametrize("bad", ["NaN", "Infinity", "1e999", "0.0", "-1.0", "1e308"])
def test_show_compare_and_update_stop_on_a_pool_whose_samples_no_run_gives_naming_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: str) -> None:
    """Before (issue 37): a traceback (ValueError: log-scale metric with non-positive values), or, for an infinite
    window, a pool judged with `catches nan%` (`compare` rc 0, an `improvement`) and `update` a traceback."""
    bl = str(tmp_path / "bl")
    runs = [results_file(tmp_path, f"a{i}", noisy(10.0, i), date=f"2025-01-0{i}T00:00:00+00:00") for i in (1, 2, 3)]
    assert main(["update", "--from", *map(str, runs), "--baseline-dir", bl]) == 0
    pool = tmp_path / "bl" / "m1" / "demo%2Fc=4.json"
    data = json.loads(pool.read_text())
    data["runs"][1]["samples"]["latency_p50_ms"][2] = "BAD"
    pool.write_text(json.dumps(data).replace('"BAD"', bad))
    capsys.readouterr()
    new = results_file(tmp_path, "b", noisy(10.0, 9), date="2025-01-05T00:00:00+00:00")
    for argv in (["show"], ["compare", str(new)], ["update", "--from", str(new)]):
        assert main([*argv, "--baseline-dir", bl]) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith(f"perf-baseline: error: baseline file {pool} is malformed (run m1@a2: "
                              "samples['latency_p50_ms'] has "), err
        assert f"restore it from git (`git checkout -- {pool}`) or recreate it with" in err
    assert len(json.loads(pool.read_text())["runs"]) == 3  # update wrote nothing


def test_show_says_a_pool_in_another_machine_keys_folder_judges_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before (issue 37): `show` listed a pool copied by hand into another key's folder like any other, rc 0."""
    bl = tmp_path / "bl"
    runs = [results_file(tmp_path, f"a{i}", noisy(10.0, i), date=f"2025-01-0{i}T00:00:00+00:00") for i in (1, 2, 3)]
    assert main(["update", "--from", *map(str, runs), "--baseline-dir", str(bl)]) == 0
    (bl / "m2").mkdir()
    (bl / "m1" / "demo%2Fc=4.json").rename(bl / "m2" / "demo%2Fc=4.json")
    capsys.readouterr()
    assert main(["show", "--baseline-dir", str(bl)]) == 1
    out, err = capsys.readouterr()
    assert (f"judges nothing: baseline file {bl / 'm2' / 'demo%2Fc=4.json'} was recorded for machine key 'm1' but "
            "lies in the folder of 'm2'") in out
    assert f"move it to {bl / 'm1'}/ if it belongs there" in out
    assert "1 pool(s) lie in the folder of another machine key and judge nothing" in err


def test_update_into_a_read_only_baseline_dir_is_an_error_naming_it_dry_run_or_not(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], small_tmpfs) -> None:
    """Before (issue 37): the real update printed the diff, then an OSError traceback (rc 1); its dry run said
    nothing and exited 0."""
    bl = small_tmpfs("bl", "1m")
    runs = [results_file(tmp_path, f"a{i}", noisy(10.0, i), date=f"2025-01-0{i}T00:00:00+00:00") for i in (1, 2, 3)]
    assert main(["update", "--from", *map(str, runs[:2]), "--baseline-dir", str(bl)]) == 0
    subprocess.run(["mount", "-o", "remount,ro", str(bl)], check=True, timeout=30)  # not writable, even by root
    capsys.readouterr()
    for dry in (["--dry-run"], []):
        assert main(["update", "--from", str(runs[2]), "--baseline-dir", str(bl), *dry]) == 2, dry
        out, err = capsys.readouterr()
        assert "runs 2 -> 3" in out  # the diff first
        assert err.startswith(f"perf-baseline: error: the pools cannot be written under {bl}: {bl}/m1 is not "
                              f"writable; pass --baseline-dir a directory this user can write (or make {bl} "
                              "writable)"), err
    assert len(json.loads((bl / "m1" / "demo%2Fc=4.json").read_text())["runs"]) == 2


def test_re_adding_a_pooled_run_says_it_is_already_pooled_and_writes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before (issue 37): `+1 run(s) m1@a1`, `runs 3 -> 3`, and the pool rewritten."""
    bl = str(tmp_path / "bl")
    runs = [results_file(tmp_path, f"a{i}", noisy(10.0, i), date=f"2025-01-0{i}T00:00:00+00:00") for i in (1, 2, 3)]
    assert main(["update", "--from", *map(str, runs), "--baseline-dir", bl]) == 0
    pool = tmp_path / "bl" / "m1" / "demo%2Fc=4.json"
    written = pool.stat().st_mtime_ns
    capsys.readouterr()
    assert main(["update", "--from", str(runs[0]), str(runs[0]), "--baseline-dir", bl]) == 0
    assert capsys.readouterr().out == (f"{pool}: +0 run(s) -\n"
                                       "  already pooled (0 added, left as it is): m1@a1\n"
                                       "  already pooled (0 added, left as it is): m1@a1\n")
    assert pool.stat().st_mtime_ns == written


def mixed_runs() -> list[ResultsFile]:
    """Three runs measuring demo/c=4 (judged pass) and other/c=8 (judged regression every time)."""
    out = []
    for i in (1, 2, 3):
        a = RunResult("demo/c=4", {"c": "4"}, {"latency_p50_ms": tuple(noisy(10.0, i))})
        b = RunResult("other/c=8", {"c": "8"}, {"latency_p50_ms": tuple(noisy(20.0, i))})
        out.append(ResultsFile((a, b), "m1", {"host": HOST.to_json()}, date=f"2025-01-0{i}T00:00:00+00:00",
                               run_id=f"m1@r{i}", verdicts={"demo/c=4": {"latency_p50_ms": "pass"},
                                                            "other/c=8": {"latency_p50_ms": "regression"}}))
    return out


def assert_names_the_scenario_with_no_clean_run(code: int, out: str, err: str) -> None:
    assert code == 2
    assert "demo/c=4: pooling m1@r1, m1@r2, m1@r3" in out
    assert "other/c=8: found 0 clean run(s) of the 3 asked; not pooled" in out
    assert ("error: --from-runs 3: 1 scenario(s) have fewer clean runs than asked, so their pools were not written: "
            "other/c=8 (0 of 3).") in err
    assert "every run of it was judged regression or inconclusive" in err


def test_update_from_runs_names_a_scenario_with_no_clean_run(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Before (issue 37): other/c=8 was not named at all, and the command exited 0."""
    for rf in mixed_runs():
        (tmp_path / f"results-{rf.run_id[3:]}.json").write_text(rf.dumps())
    code = main(["update", "--from-runs", "3", "--from", str(tmp_path), "--machine", "m1", "--baseline-dir",
                 str(tmp_path / "bl")])
    assert_names_the_scenario_with_no_clean_run(code, *capsys.readouterr())
    assert [p.name for p in (tmp_path / "bl" / "m1").iterdir()] == ["demo%2Fc=4.json"]


def test_migrate_a_missing_baseline_dir_and_import_a_missing_path_are_errors_that_create_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before (issue 37): `migrate` exited 0 saying nothing; `import` created the history and its directory, after
    which `runs` said `0 run(s)` with exit 0."""
    assert main(["migrate", "--baseline-dir", str(tmp_path / "nonexistent")]) == 2
    assert f"error: there is no baseline directory {tmp_path / 'nonexistent'} (--baseline-dir" in (
        capsys.readouterr().err)
    url = f"sqlite:///{tmp_path / 'new' / 'history.sqlite'}"
    assert main(["import", str(tmp_path / "nonexistent"), "--history-url", url]) == 2
    assert capsys.readouterr().err == (f"perf-baseline: error: {tmp_path / 'nonexistent'} does not exist; pass "
                                       "results JSON files or directories of them (nothing was imported, no history "
                                       "created)\n")
    assert not (tmp_path / "new").exists()
    assert main(["runs", "--history-url", url]) == 2
    assert "there is no run history at" in capsys.readouterr().err


def test_validate_counts_false_alarms_and_detections_on_runs(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    for i in range(1, 9):
        results_file(tmp_path, f"r{i}", noisy(10.0, i), date=f"2025-01-0{i}T00:00:00+00:00", verdict="pass")
    results_file(tmp_path, "slow", noisy(13.0, 99), date="2025-01-09T00:00:00+00:00", injection="slow:x=1")
    assert main(["validate", str(tmp_path), "--pool", "3"]) == 0
    out = capsys.readouterr().out
    assert "clean" in out
    assert "pass 5/5" in out
    assert "injected slow:x=1" in out
    assert "regression 1/1" in out
    assert "0 false verdict(s)" in out


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
    assert main(["history", "--from", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "latency_p50_ms (ms, lower is better): 25 run(s)" in out
    # the detector splits twice; the split at run 7 moves the level by less than the metric's 3 % floor
    assert "1 more significant change(s) smaller than the metric's floor of 3%" in out
    assert "change at run 15" in out
    assert "1 change point(s)" in out


def test_no_change_point_in_pure_noise() -> None:
    rng = np.random.default_rng(5)
    false = sum(bool(detect(100 * (1 + 0.02 * rng.standard_normal(20)), permutations=199, seed=s))
                for s in range(20))
    assert false <= 2  # alpha 0.01 per test, a few splits per series

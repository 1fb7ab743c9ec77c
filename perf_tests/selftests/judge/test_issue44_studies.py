"""The issue-44 studies read the committed H200 results of 2026-12-06 as the session read them: the A/B judged again
gives the verdicts the run printed, the pool study gives the rel.* rows, the host study finds its 92 windows."""

from __future__ import annotations

from pathlib import Path

import pytest

from perf_tests.sglang.gpu_studies import ab_rejudge, host_drift, pool_promise

RESULTS = Path(__file__).resolve().parents[3] / "docs" / "results" / "h200-issue44-2026-12-06"


def test_the_null_ab_judged_again_gives_the_rows_the_run_printed() -> None:
    (path,) = (RESULTS / "null-1").glob("results-*.json")
    group, windows, units, meta = ab_rejudge.load(path)
    assert group.replicas == 2
    assert sorted(windows) == ["candidate@1", "candidate@2", "reference@1", "reference@2"]
    rows = {v.metric: v for v in ab_rejudge.judge(group, windows, units, meta, {})}
    assert {m: v.status for m, v in rows.items()} == dict.fromkeys(
        ("cpu_s_per_request.http_server", "requests_per_s", "tpot_gmean_ms", "ttft_p50_ms"), "pass")
    assert rows["requests_per_s"].detectable == pytest.approx(0.060, abs=0.0005)  # summary.md: catches 6.0 %
    assert rows["tpot_gmean_ms"].detectable == pytest.approx(0.156, abs=0.0005)
    assert "this run's 2 same-build pair(s) (2 df)" in rows["ttft_p50_ms"].message
    history = ab_rejudge.history_sample(RESULTS / "ab-null-history.json", None)
    assert len(history["requests_per_s"]) == 3  # the two replica pairs and the null A/B's own unit


def test_the_pool_study_gives_levels_and_rel_rows_of_three_runs() -> None:
    found = pool_promise.rows(pool_promise.runs_by_arm(sorted(RESULTS.glob("pool-*/results-*.json"))))
    rel = {r["metric"]: r for r in found if r["scenario"] == "smoke-cpu/stock" and r["metric"].startswith("rel.")}
    assert set(rel) == {"rel.requests_per_s", "rel.ttft_p50_ms", "rel.tpot_gmean_ms"}
    assert all(r["runs"] == 3 for r in rel.values())
    assert rel["rel.requests_per_s"]["level"] == pytest.approx(0.669, abs=0.002)  # stock/buffer: regression 1
    for r in rel.values():
        assert r["promise"]["10"] < r["promise"]["5"] < r["promise"]["3"]  # a bigger pool promises more


def test_the_host_study_pairs_every_window_with_its_host_readings() -> None:
    paths = [*sorted(RESULTS.glob("pool-*/results-*.json")), *RESULTS.glob("null-1/results-*.json")]
    found = host_drift.analyse(host_drift.windows(paths))
    within = {(r["metric"], r["host"]): r for r in found["within_runs"]}
    assert within[("requests_per_s", "host_steal_fraction")]["windows"] == 92
    assert within[("requests_per_s", "host_steal_fraction")]["r"] < 0  # slower windows had more steal

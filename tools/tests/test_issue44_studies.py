"""The issue-44 studies read the committed H200 and H100 results of 2026-12-06 as the sessions read them: an A/B judged
again gives the verdicts the run printed, the pool study gives the rel.* rows, the host study finds its 92 windows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.studies import ab_rejudge, host_drift, pool_promise

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results" / "h200-issue44-2026-12-06"


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


LEASE2 = RESULTS.parent / "h100-issue44-2026-12-06b"


def test_each_ab_of_the_second_lease_judged_again_gives_its_printed_rows_and_leave_one_out_uses_the_others() -> None:
    history = LEASE2 / "ab-null-history.json"
    ids = [e["run"].rpartition("#")[2] for e in json.loads(history.read_text())["entries"]]
    assert len(ids) == 4  # null 1, null 2, patch 1, patch 2, in that order
    (patch1,) = (LEASE2 / "patch-1").glob("results-*.json")
    group, windows, units, meta = ab_rejudge.load(patch1)
    as_run = {v.metric: v for v in ab_rejudge.judge(group, windows, units, meta,
                                                    ab_rejudge.history_sample(history, ids[2]))}
    assert as_run["tpot_gmean_ms"].status == "regression"  # summary.md: +10.1 %, catches 7.0 %
    assert as_run["tpot_gmean_ms"].detectable == pytest.approx(0.070, abs=0.0005)
    assert "(5 df)" in as_run["tpot_gmean_ms"].message
    # null 1 was the fresh host's first group: kept aside, so null 2's 3 units are all patch 1 had
    assert len(ab_rejudge.history_sample(history, ids[2])["requests_per_s"]) == 3
    others = ab_rejudge.history_sample(history, ids[2], others=True)
    assert len(others["requests_per_s"]) == 5  # null 2's 3 and patch 2's 2, never its own
    assert len(ab_rejudge.history_sample(history, ids[1], others=True)["requests_per_s"]) == 4  # the patch runs' pairs


def test_the_components_split_a_null_runs_pair_units_into_offsets_blocks_and_window_noise() -> None:
    (null2,) = (LEASE2 / "null-2").glob("results-*.json")
    _, windows, _, _ = ab_rejudge.load(null2)
    c = ab_rejudge.components(windows, "ttft_p50_ms")
    assert c["engines"] == 4
    assert c["blocks"] == 4
    assert c["block"] > c["residual"] > c["offset"] >= 0  # the host's drift inside a run dominates, pairing removes it
    assert ab_rejudge.components({"a@1": [(0, {"x": 1.0})]}, "ttft_p50_ms") == {}  # too little to split

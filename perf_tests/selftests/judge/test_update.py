"""Guarded updates: clean runs pool, regressed/inconclusive ones need --accept, injected and A/B runs never do; a
pool is one host's."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine_fixtures.errors import BaselineError
from engine_fixtures.machine import HostIdentity
from engine_fixtures.store.baselines import BaselineStore
from engine_fixtures.store.results import ResultsFile, RunResult
from engine_fixtures.store.update import apply, describe, last_clean_runs, plan_update

S = "demo/c=4"
HOST = HostIdentity(("GPU-aaaa",), "Intel(R) Xeon(R) Processor", 3800.0, "6.8.0", "h200-a")
OTHER = HostIdentity(("GPU-bbbb",), "Intel(R) Xeon(R) Processor", 3800.0, "6.8.0", "h200-b")


def rf(day: int, verdict: str | None = "pass", injection: str = "", reference: str = "", key: str = "m",
       host: HostIdentity | None = HOST) -> ResultsFile:
    r = RunResult(S, {"c": "4"}, {"requests_per_s": (20.0 + day * 0.1, 20.2, 19.9)})
    verdicts = {S: {"requests_per_s": verdict}} if verdict else {}
    machine = {"host": host.to_json()} if host is not None else {}
    return ResultsFile((r,), key, machine, date=f"2025-01-{day:02d}T00:00:00+00:00", verdicts=verdicts,
                       injection=injection, reference=reference, run_id=f"{key}@{day}")


def test_clean_and_unjudged_runs_pool_and_the_diff_says_so(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path, "m")
    plans = plan_update(store, [rf(1, None), rf(2), rf(3, "improvement")])
    (plan,) = plans
    assert len(plan.added) == 3
    assert plan.refused == ()
    text = "\n".join(describe(plan))
    assert "requests_per_s: level - -> 20.1" in text
    assert "runs 0 -> 3" in text
    assert apply(store, plans) == [store.path_for(S)]


def test_regressed_or_inconclusive_runs_need_a_reason_which_is_stored(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path, "m", HOST)
    (plan,) = plan_update(store, [rf(1), rf(2, "regression"), rf(3, "inconclusive")])
    assert len(plan.added) == 1
    assert len(plan.refused) == 2
    assert "--accept REASON" in plan.refused[0]
    (plan,) = plan_update(store, [rf(2, "regression")], accept="new scheduler trades 5% TTFT for memory")
    apply(store, [plan])
    run = store.load(S).runs[-1]
    assert run.verdict == "regression"
    assert run.accepted == "new scheduler trades 5% TTFT for memory"


def test_injected_and_ab_runs_are_never_recorded_even_with_accept(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path, "m")
    (plan,) = plan_update(store, [rf(1, injection="slow:torch=6"), rf(2, reference="patch:slow-scheduler=1")],
                          accept="please")
    assert plan.added == ()
    assert "injected" in plan.refused[0]
    assert "A/B" in plan.refused[1]
    assert apply(store, [plan]) == []


def test_a_run_of_another_machine_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BaselineError, match="not 'm'"):
        plan_update(BaselineStore(tmp_path, "m"), [rf(1, key="other")])


def test_last_clean_runs_picks_the_newest_k_of_this_machine() -> None:
    files = [rf(1), rf(2, "regression"), rf(3), rf(4, injection="copy:buffer=torch"), rf(5), rf(6, key="x"), rf(7)]
    chosen = last_clean_runs(files, "m", 3)
    assert [f.date[:10] for f in chosen[S]] == ["2025-01-03", "2025-01-05", "2025-01-07"]


def test_a_pool_records_its_host_and_refuses_another_hosts_runs(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path, "m", HOST)
    (plan,) = plan_update(store, [rf(1), rf(2, host=OTHER), rf(3)])
    assert plan.added == ("m@1", "m@3")
    (why,) = plan.refused
    assert why.startswith("m@2: measured on h200-b (GPU-bbbb;")
    assert "the pool at" in why
    assert "is of h200-a (GPU-aaaa;" in why
    assert "perf-baseline update --from-runs 5" in why
    apply(store, [plan])
    assert store.load(S).host == HOST
    (plan,) = plan_update(store, [rf(4, host=OTHER)])  # the stored pool is h200-a's
    assert plan.added == ()
    assert "is of h200-a" in plan.refused[0]
    (plan,) = plan_update(store, [rf(4, host=OTHER)], replace_pool=True)  # --replace / --from-runs: a fresh pool
    assert plan.added == ("m@4",)
    assert plan.after.host == OTHER


def test_a_run_without_a_host_record_is_never_pooled(tmp_path: Path) -> None:
    (plan,) = plan_update(BaselineStore(tmp_path, "m"), [rf(1, host=None)], accept="please")
    assert plan.added == ()
    assert "no host record" in plan.refused[0]


def test_last_clean_runs_are_one_hosts() -> None:
    files = [rf(1), rf(2, host=OTHER), rf(3), rf(4, host=None), rf(5, host=OTHER)]
    assert [f.date[:10] for f in last_clean_runs(files, "m", 3, host=HOST)[S]] == ["2025-01-01", "2025-01-03"]
    newest = last_clean_runs(files, "m", 3)  # no host given: the newest run's host
    assert [f.date[:10] for f in newest[S]] == ["2025-01-02", "2025-01-05"]

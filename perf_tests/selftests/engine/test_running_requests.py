"""Running requests from the scheduler's own count: the plugin's probe on ``Scheduler.run_batch`` (a stand-in
scheduler module here), the histogram of batch sizes read back as a max and a mean per segment (never summed over
scheduler processes), and what reads them (a per-segment value, one per segment: ``RunResult.windows_of``,
``CounterBound``)."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from engine_fixtures import CounterBound
from engine_fixtures.engine.proof import ArmProof
from engine_fixtures.engine.running import batch_histograms, probe_states, running_requests, summarize
from engine_fixtures.errors import InvariantViolated, MeasurementError
from engine_fixtures.scenarios.segment import segment_values
from engine_fixtures.session.recorder import InvariantJudge, PerfRecorder
from engine_fixtures.sglang_plugin.instrument import (
    RUNNING_PROBE,
    SCHEDULER_MODULE_ENV,
    install_running_probe,
)
from engine_fixtures.sglang_plugin.proof_file import Recorder
from engine_fixtures.store.results import RunResult
from perf_tests.selftests.engine.test_proof import proc
from perf_tests.support import stub_scheduler
from perf_tests.support.lockstep import closed_loop, segment_of

MODULE = "perf_fake_scheduler"  # the scheduler module the probe is pointed at (PERF_ARMS_SCHEDULER_MODULE)
DECODE, MIXED, EXTEND = (stub_scheduler.ForwardMode[m] for m in ("DECODE", "MIXED", "EXTEND"))


def batch(n: int, mode: stub_scheduler.ForwardMode = DECODE) -> stub_scheduler.ScheduleBatch:
    return stub_scheduler.ScheduleBatch(tuple(range(n)), mode)


@pytest.fixture
def scheduler_module(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """A fresh scheduler module, imported (in ``sys.modules``) as SGLang's is in a scheduler process."""
    module = types.ModuleType(MODULE)

    class Scheduler(stub_scheduler.Scheduler):
        def run_batch(self, batch: Any, pp_proxy_tensors: Any = None) -> tuple[int, Any]:
            return len(batch.reqs), pp_proxy_tensors

    module.Scheduler = Scheduler  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, MODULE, module)
    monkeypatch.setenv(SCHEDULER_MODULE_ENV, MODULE)
    return module


# ------------------------------------------------------------------------------------------- the plugin's probe
def test_the_probe_counts_decode_and_mixed_batches_by_size_and_changes_nothing(tmp_path: Path,
                                                                               scheduler_module: Any) -> None:
    rec = Recorder(tmp_path, {})
    install_running_probe(rec)
    install_running_probe(rec)  # idempotent: one wrapper, one count per batch
    assert (rec.errors, rec.installed[RUNNING_PROBE]) == ([], f"{MODULE}.Scheduler.run_batch")
    s = scheduler_module.Scheduler()
    assert s.run_batch(batch(16), "proxy") == (16, "proxy")  # the call and its result are SGLang's
    assert s.run_batch(batch=batch(16)) == (16, None)
    for b in (batch(3), batch(5, MIXED), batch(7, EXTEND), batch(0, stub_scheduler.ForwardMode.IDLE)):
        s.run_batch(b)
    assert rec.counters == {"running_batch.16": 2, "running_batch.3": 1,
                                                       "running_batch.5": 1}
    assert not rec.path.exists()  # counted without a write: the proof thread writes


def test_a_batch_the_probe_cannot_read_is_one_error_and_still_runs(tmp_path: Path, scheduler_module: Any) -> None:
    rec = Recorder(tmp_path, {})
    install_running_probe(rec)
    s = scheduler_module.Scheduler()
    for _ in range(3):
        assert s.run_batch(SimpleNamespace(reqs=(1, 2), forward_mode=None)) == (2, None)
    (error,) = rec.errors  # once, however many batches
    assert error.startswith(f"running: a batch handed to {MODULE}.Scheduler.run_batch could not be counted"), error


def test_a_scheduler_without_the_method_or_with_another_signature_is_an_error(tmp_path: Path,
                                                                               scheduler_module: Any) -> None:
    scheduler_module.Scheduler = type("Scheduler", (), {})
    rec = Recorder(tmp_path, {})
    install_running_probe(rec)
    assert rec.errors == [f"running: there is no {MODULE}.Scheduler.run_batch, so running requests cannot be counted"]
    scheduler_module.Scheduler = type("Scheduler", (), {"run_batch": lambda self, forward_batch: None})
    rec = Recorder(tmp_path, {})
    install_running_probe(rec)
    assert rec.errors == [f"running: {MODULE}.Scheduler.run_batch takes (self, forward_batch), not (self, batch, "
                          "...), so running requests cannot be counted"]


def test_a_process_without_the_scheduler_module_has_no_probe_and_no_error(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SCHEDULER_MODULE_ENV, "perf_no_such_scheduler_module")
    rec = Recorder(tmp_path, {})
    install_running_probe(rec)
    assert rec.errors == []
    assert rec.installed[RUNNING_PROBE].startswith("none: perf_no_such_scheduler_module was not imported")


# ------------------------------------------------------------------------------------- the histogram read back
def test_max_and_mean_of_a_histogram() -> None:
    r = summarize({7: {16: 30.0, 12: 10.0}})
    assert r is not None
    assert (r.max, r.batches, r.processes) == (16.0, 40.0, 1)
    assert r.mean == pytest.approx((16 * 30 + 12 * 10) / 40)
    assert summarize({}) is None


def sched(pid: int, counts: dict[int, float], **kw: Any) -> Any:
    return proc("scheduler", pid, counters={f"running_batch.{n}": c for n, c in counts.items()}, **kw)


def test_two_pp_ranks_are_never_summed_and_only_growth_counts() -> None:
    """PP=2: both stages run the same micro-batches (each at most the cap, 4); the segment's max is one micro-batch,
    not the sum over ranks, and the mean is the micro-batch size per step."""
    before = ArmProof((sched(11, {4: 100, 2: 5}), sched(12, {4: 100, 2: 5})))
    after = ArmProof((sched(11, {4: 130, 3: 10, 2: 5}), sched(12, {4: 130, 3: 10, 2: 5}),
                      sched(13, {1: 2}), proc("http_server", 10, counters={"running_batch.99": 1})))
    hist = batch_histograms(before, after)
    assert hist[11] == hist[12] == {4: 30.0, 3: 10.0}  # 2 did not grow: a batch size of before the segment
    assert hist[13] == {1: 2.0}  # a process born since: counted from zero
    r = running_requests(before, ArmProof(after.processes[:2]))
    assert r is not None
    assert (r.max, r.processes, r.batches) == (4.0, 2, 80.0)
    assert r.mean == pytest.approx((4 * 30 + 3 * 10) / 40)
    assert running_requests(before, before) is None


def test_a_segment_without_a_counted_batch_says_what_the_probe_reported() -> None:
    seg = segment_of(closed_loop(4, 0.5, 10.0), 4, 0.0, 10.0)
    quiet = ArmProof((sched(11, {}, installed={RUNNING_PROBE: "none: nothing imported"},
                            errors=("running: SGLang 9.9: moved",)),))
    with pytest.raises(MeasurementError, match=r"scheduler pid 11: none: nothing imported \(running: SGLang 9.9"):
        segment_values(seg, quiet, quiet)
    assert probe_states(quiet) == ["scheduler pid 11: none: nothing imported (running: SGLang 9.9: moved)"]
    values = segment_values(seg, ArmProof((sched(11, {}),)), ArmProof((sched(11, {4: 9, 3: 1}),)))
    assert (values["running_requests_max"], values["running_requests_mean"]) == (4.0, pytest.approx(3.9))
    assert "ipc_opens_per_image" not in values
    assert set(segment_values(seg, None, None)) <= {"client_loop_lag_p99_ms"}  # no proofs read: nothing per segment


# ------------------------------------------------------------------------------ one value per segment, read back
SPARSE = {"window_instance": ["e1", "e1", "e2", "e2"], "sample_windows": {"running_requests_max": [0, 2]}}


def judge_counter(result: RunResult, bound: CounterBound) -> Any:
    """Through the recorder's one finish path (record, sections, conclude), with a session that only keeps rows."""
    recorded: list[Any] = []
    item = SimpleNamespace(nodeid="t::counter", get_closest_marker=lambda _name: None,
                           add_report_section=lambda *_a: None, stash={})
    session = SimpleNamespace(record_invariant=lambda *a: recorded.append(a), settings=SimpleNamespace(strict=True))
    recorder = PerfRecorder(session, item)  # type: ignore[arg-type]
    try:
        return InvariantJudge(recorder, SimpleNamespace(get=lambda _arm: result)).counter(bound)
    finally:
        assert recorded


def test_a_counter_bound_reads_one_value_per_segment() -> None:
    r = RunResult("s", {}, {"requests_per_s": (1.0, 1.1, 1.2, 1.3), "running_requests_max": (16.0, 15.0)},
                  metadata=SPARSE)
    v = judge_counter(r, CounterBound("admits C", "running_requests_max", "on", 16, kind="at_least"))
    assert (v.status, v.windows) == ("pass", 2)
    assert "peak 16 over 2 values from 4 windows (at least 16): holds" in v.message
    with pytest.raises(InvariantViolated, match="worst value 16 over 2 values from 4 windows"):
        judge_counter(r, CounterBound("capped", "running_requests_max", "on", 8))

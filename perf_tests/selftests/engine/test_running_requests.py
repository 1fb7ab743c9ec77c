"""Running requests from the scheduler's own count: the plugin's probe on ``Scheduler.run_batch`` (a stand-in
scheduler module here)."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from engine_fixtures.sglang_plugin.instrument import (
    RUNNING_PROBE,
    SCHEDULER_MODULE_ENV,
    install_running_probe,
)
from engine_fixtures.sglang_plugin.proof_file import Recorder
from engine_fixtures.testing import stub_scheduler

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

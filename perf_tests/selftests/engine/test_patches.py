"""Named patches (known slowdowns a build can carry): parsing, installation by role, live magnitude (the live arm's
patches, arms.json), proof."""

from __future__ import annotations

import asyncio
import sys
import time
import types
from pathlib import Path

import pytest

from engine_fixtures.inject import spin
from engine_fixtures.sglang_plugin import patches
from engine_fixtures.sglang_plugin.arm_state import write_arm_file
from engine_fixtures.sglang_plugin.proof_file import Recorder
from engine_fixtures.transport.live import LiveArm


class FakeScheduler:
    def run_batch(self, batch: int) -> int:
        return batch + 1


class FakeTokenizerManager:
    async def _send_one_request(self, obj: str) -> str:
        return obj.upper()


@pytest.fixture
def fake_sglang(monkeypatch: pytest.MonkeyPatch):
    sched = types.ModuleType("fake_sched")
    sched.Scheduler = type("Scheduler", (FakeScheduler,), {"run_batch": FakeScheduler.run_batch})
    tok = types.ModuleType("fake_tok")
    tok.TokenizerManager = type("TokenizerManager", (FakeTokenizerManager,),
                                {"_send_one_request": FakeTokenizerManager._send_one_request})
    monkeypatch.setitem(sys.modules, "fake_sched", sched)
    monkeypatch.setitem(sys.modules, "fake_tok", tok)
    monkeypatch.setattr(patches, "TARGETS", {
        "slow-scheduler": patches.Target("fake_sched", "Scheduler", "run_batch", "scheduler"),
        "slow-tokenizer": patches.Target("fake_tok", "TokenizerManager", "_send_one_request", "http_server")})
    monkeypatch.setattr(patches, "_MAGNITUDE_MS", {})
    return sched, tok


def test_parse_names_the_known_patches() -> None:
    assert patches.parse("slow-scheduler=0.3, slow-tokenizer=2") == {"slow-scheduler": 0.3, "slow-tokenizer": 2.0}
    assert patches.parse("slow-decode=0.4") == {"slow-decode": 0.4}
    with pytest.raises(ValueError, match="known patches are slow-decode, slow-scheduler, slow-tokenizer"):
        patches.parse("slow-gpu=1")
    with pytest.raises(ValueError, match="must be a number"):
        patches.parse("slow-scheduler=fast")


def test_spin_burns_cpu_not_sleep() -> None:
    t0, c0 = time.perf_counter(), time.process_time()
    spin(30)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert wall >= 0.030
    assert cpu >= 0.5 * wall  # a sleep would use ~0 CPU


def test_install_where_the_target_is_imported_counts_calls_and_follows_live_magnitude(
        fake_sglang, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sched, _tok = fake_sglang
    monkeypatch.delitem(sys.modules, "fake_tok")  # this process never imported the tokenizer manager
    rec = Recorder(tmp_path, {})
    patches.install(rec, "http_server", {"slow-scheduler": 5.0, "slow-tokenizer": 5.0})  # a title not set yet
    assert "patch:slow-scheduler" in rec.installed
    assert "patch:slow-tokenizer" not in rec.installed
    assert rec.errors == ["patch slow-tokenizer: fake_tok is not imported in this http_server process"]
    t0 = time.perf_counter()
    assert sched.Scheduler().run_batch(1) == 2
    assert time.perf_counter() - t0 >= 0.005
    assert rec.counters == {"patch_calls.slow-scheduler": 1.0, "patch_ms.slow-scheduler": 5.0}
    rec.live.add_applier(patches.apply_arm)
    write_arm_file(tmp_path, LiveArm(patches=(("slow-scheduler", 0.0),)), seq=1)
    rec.live.refresh(tmp_path)  # what the proof thread does before it answers a flush
    assert patches.magnitudes() == {"slow-scheduler": 0.0}
    sched.Scheduler().run_batch(1)
    assert rec.counters["patch_ms.slow-scheduler"] == 5.0  # the second call added 0 ms
    write_arm_file(tmp_path, LiveArm(), seq=2)  # an installed patch the arm does not name runs at 0 ms
    rec.live.refresh(tmp_path)
    assert patches.magnitudes() == {"slow-scheduler": 0.0}
    write_arm_file(tmp_path, LiveArm(patches=(("slow-scheduler", 2.0), ("slow-gpu", 1.0))), seq=3)
    rec.live.refresh(tmp_path)
    assert patches.magnitudes() == {"slow-scheduler": 2.0}
    assert rec.live.snapshot()["arm_errors"] == [
        "unknown patch 'slow-gpu': known patches are slow-scheduler, slow-tokenizer"]


def test_async_method_stays_async(fake_sglang, tmp_path: Path) -> None:
    _, tok = fake_sglang
    rec = Recorder(tmp_path, {})
    patches.install(rec, "http_server", {"slow-tokenizer": 1.0})
    assert asyncio.run(tok.TokenizerManager()._send_one_request("a")) == "A"
    assert rec.counters["patch_calls.slow-tokenizer"] == 1.0


def test_a_missing_target_is_recorded_not_raised(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    mod = types.ModuleType("fake_sched_without_method")
    mod.Scheduler = type("Scheduler", (), {})
    monkeypatch.setitem(sys.modules, "fake_sched_without_method", mod)
    monkeypatch.setattr(patches, "TARGETS", {
        "slow-scheduler": patches.Target("fake_sched_without_method", "Scheduler", "run_batch", "scheduler")})
    rec = Recorder(tmp_path, {})
    patches.install(rec, "scheduler", {"slow-scheduler": 1.0})
    assert rec.installed == {}
    assert "cannot find fake_sched_without_method.Scheduler.run_batch" in rec.errors[0]

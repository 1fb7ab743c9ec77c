"""The GPU named patch ``slow-decode``: a GPU delay before every decode step's forward (``patches.DecodeDelay``), its
cycles from the device's clock (``gpu_delay.CudaSleep``), its live magnitude, its install once SGLang imports the
model runner, and its refusals (no CUDA, a moved layout, a capturing stream) as errors in the proof. No GPU: the
CUDA calls are a fake ``torch.cuda`` and the model runner a stand-in module."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from engine_fixtures import sglang_version as sv
from engine_fixtures.scenarios.group import PATCH_ROLES
from engine_fixtures.sglang_plugin import gpu_delay, patches
from engine_fixtures.sglang_plugin.arm_state import write_arm_file
from engine_fixtures.sglang_plugin.proof_file import Recorder
from engine_fixtures.transport.live import LiveArm

REPO = Path(__file__).resolve().parents[3]
H200_KHZ = 1_980_000  # cudaDevAttrClockRate of an H200: 1980 MHz


class Mode:
    """A stand-in ``ForwardMode``: only what the patch asks."""

    def __init__(self, decode: bool) -> None:
        self.decode = decode

    def is_decode(self) -> bool:
        return self.decode


class Batch:
    def __init__(self, decode: bool) -> None:
        self.forward_mode = Mode(decode)


class FakeCuda:
    """What ``gpu_delay`` uses of ``torch.cuda``; every ``_sleep`` lands in ``events`` as ("sleep", cycles)."""

    def __init__(self, events: list, clock_khz: int = H200_KHZ, nvml_mhz: int = 0, available: bool = True) -> None:
        self.events, self.clock_khz, self.nvml_mhz, self.available = events, clock_khz, nvml_mhz, available
        self.capturing = False

    def is_available(self) -> bool:
        return self.available

    def current_device(self) -> int:
        return 3

    def get_device_properties(self, device: int) -> Any:
        return types.SimpleNamespace(clock_rate=self.clock_khz) if self.clock_khz else types.SimpleNamespace()

    def clock_rate(self, device: int) -> int:
        if not self.nvml_mhz:
            raise RuntimeError("NVML unavailable")
        return self.nvml_mhz

    def _sleep(self, cycles: int) -> None:
        self.events.append(("sleep", cycles))

    def is_current_stream_capturing(self) -> bool:
        return self.capturing


@pytest.fixture
def events() -> list:
    return []


@pytest.fixture
def cuda(events: list) -> FakeCuda:
    return FakeCuda(events)


@pytest.fixture
def runner_module(monkeypatch: pytest.MonkeyPatch, events: list, cuda: FakeCuda) -> types.ModuleType:
    """A stand-in model-runner module, the slow-decode target pointed at it, the GPU seams at the fake CUDA."""

    def forward(self: Any, forward_batch: Batch, pp_proxy_tensors: Any = None) -> str:
        events.append(("forward", forward_batch.forward_mode.decode))
        return "logits"

    mod = types.ModuleType("fake_model_runner")
    mod.ModelRunner = type("ModelRunner", (), {"forward": forward, "is_draft_worker": False})
    monkeypatch.setitem(sys.modules, "fake_scheduler_module", types.ModuleType("fake_scheduler_module"))
    monkeypatch.setattr(patches, "TARGETS", {"slow-decode": patches.Target(
        "fake_model_runner", "ModelRunner", "forward", "scheduler", patches.GPU_SLEEP,
        imported_by="fake_scheduler_module", params=sv.MODEL_FORWARD_PARAMS)})
    monkeypatch.setattr(patches, "_MAGNITUDE_MS", {})
    monkeypatch.setattr(patches, "GPU_UNAVAILABLE", lambda: gpu_delay.cuda_unavailable(cuda))
    monkeypatch.setattr(patches, "GPU_DELAY", lambda: gpu_delay.cuda_sleep(cuda))
    return mod


def test_slow_decode_is_a_gpu_patch_on_the_model_runner_forward_of_the_schedulers() -> None:
    assert patches.parse("slow-decode=0.4") == {"slow-decode": 0.4}
    target = patches.TARGETS["slow-decode"]
    assert target.where == "sglang.srt.model_executor.model_runner.ModelRunner.forward"
    assert (target.delay, target.role, target.imported_by) == (patches.GPU_SLEEP, "scheduler", sv.SCHEDULER_MODULE)
    assert patches.TARGETS["slow-scheduler"].delay == patches.CPU_SPIN
    assert PATCH_ROLES["slow-decode"] == "scheduler"  # the scenarios read the patches' own roles


def test_cycles_come_from_the_device_clock_once(events: list, cuda: FakeCuda) -> None:
    delay = gpu_delay.cuda_sleep(cuda)
    assert (delay.device, delay.clock_khz, delay.source) == (3, H200_KHZ, gpu_delay.PEAK_CLOCK)
    assert delay.cycles(0.4) == 792_000  # 0.4 ms at 1980 MHz
    assert delay(0.4) is True
    assert events == [("sleep", 792_000)]
    assert "1980 MHz" in delay.describe()
    assert "1980000 cycles per ms" in delay.describe()
    cuda.capturing = True  # never into a graph being captured
    assert delay(0.4) is False
    assert delay(0.0) is True
    assert events == [("sleep", 792_000)]


def test_a_torch_without_the_peak_clock_uses_nvml_and_none_at_all_is_refused(events: list) -> None:
    nvml = gpu_delay.cuda_sleep(FakeCuda(events, clock_khz=0, nvml_mhz=1755))
    assert (nvml.cycles(1.0), nvml.source) == (1_755_000, gpu_delay.NVML_CLOCK)
    with pytest.raises(RuntimeError, match="cannot read the SM clock of cuda:3"):
        gpu_delay.cuda_sleep(FakeCuda(events, clock_khz=0))


def test_only_decode_steps_get_the_delay_before_their_forward_counted(
        runner_module: types.ModuleType, events: list, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fake_model_runner", runner_module)
    rec = Recorder(tmp_path, {})
    patches.install(rec, "http_server", {"slow-decode": 0.4})  # a scheduler before its title is set
    assert rec.errors == []
    assert rec.installed["patch:slow-decode"] == "fake_model_runner.ModelRunner.forward +0.4 ms (GPU sleep on the " \
                                                "forward's stream, decode steps)"
    runner = runner_module.ModelRunner()
    assert runner.forward(Batch(decode=False)) == "logits"  # a prefill (extend) step
    assert runner.forward(Batch(decode=True), pp_proxy_tensors=None) == "logits"
    assert events == [("forward", False), ("sleep", 792_000), ("forward", True)]  # the sleep first, same stream
    assert rec.counters == {"patch_calls.slow-decode": 1.0, "patch_ms.slow-decode": 0.4}
    assert "cuda:3: 1980 MHz" in rec.installed["patch:slow-decode.gpu_delay"]
    draft = runner_module.ModelRunner()
    draft.is_draft_worker = True  # a speculative draft model's decode is not the step
    draft.forward(Batch(decode=True))
    assert events[3:] == [("forward", True)]  # no sleep before it
    assert rec.counters["patch_calls.slow-decode"] == 1.0


def test_the_live_arm_switches_its_milliseconds(runner_module: types.ModuleType, events: list, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fake_model_runner", runner_module)
    rec = Recorder(tmp_path, {})
    patches.install(rec, "scheduler", {"slow-decode": 0.4})
    rec.live.add_applier(patches.apply_arm)
    runner = runner_module.ModelRunner()
    write_arm_file(tmp_path, LiveArm(patches=(("slow-decode", 1.0),)), seq=1)
    rec.live.refresh(tmp_path)
    runner.forward(Batch(decode=True))
    write_arm_file(tmp_path, LiveArm(patches=(("slow-decode", 0.0),)), seq=2)
    rec.live.refresh(tmp_path)
    runner.forward(Batch(decode=True))  # counted at 0 ms, nothing enqueued
    write_arm_file(tmp_path, LiveArm(), seq=3)  # not named: 0 ms
    rec.live.refresh(tmp_path)
    assert patches.magnitudes() == {"slow-decode": 0.0}
    runner.forward(Batch(decode=True))
    assert [e for e in events if e[0] == "sleep"] == [("sleep", 1_980_000)]
    assert rec.counters == {"patch_calls.slow-decode": 3.0, "patch_ms.slow-decode": 1.0}
    assert rec.live.snapshot()["arm_errors"] == []


def test_it_waits_for_sglang_to_import_the_model_runner(runner_module: types.ModuleType, events: list,
                                                        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rec = Recorder(tmp_path, {})
    patches.install(rec, "scheduler", {"slow-decode": 0.4})  # the scheduler module is there, the runner not yet
    assert rec.installed == {"patch:slow-decode": "pending: until SGLang imports fake_model_runner here"}
    assert patches.magnitudes() == {"slow-decode": 0.4}  # held for the live arm meanwhile
    (attempt,) = rec.deferred
    assert attempt() is False
    runner_module.__spec__ = types.SimpleNamespace(_initializing=True)  # SGLang is still importing it
    monkeypatch.setitem(sys.modules, "fake_model_runner", runner_module)
    assert attempt() is False
    runner_module.__spec__ = types.SimpleNamespace(_initializing=False)
    assert attempt() is True  # what the proof thread does (Recorder.deferred)
    assert rec.installed["patch:slow-decode"].startswith("fake_model_runner.ModelRunner.forward +0.4 ms")
    runner_module.ModelRunner().forward(Batch(decode=True))
    assert events == [("sleep", 792_000), ("forward", True)]


def test_no_scheduler_here_is_silent_and_a_scheduler_without_it_is_an_error(
        runner_module: types.ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "fake_scheduler_module")
    rec = Recorder(tmp_path, {})
    patches.install(rec, "http_server", {"slow-decode": 0.4})
    assert (rec.installed, rec.errors, rec.deferred) == ({}, [], [])
    patches.install(rec, "scheduler", {"slow-decode": 0.4})
    assert rec.errors == ["patch slow-decode: fake_model_runner is not imported in this scheduler process"]


def test_no_cuda_is_refused_in_the_proof_and_sglang_is_left_alone(
        runner_module: types.ModuleType, cuda: FakeCuda, events: list, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fake_model_runner", runner_module)
    original = runner_module.ModelRunner.__dict__["forward"]
    cuda.available = False
    rec = Recorder(tmp_path, {})
    patches.install(rec, "scheduler", {"slow-decode": 0.4})
    assert rec.errors == ["patch slow-decode: torch.cuda is not available here (no visible CUDA device, or a torch "
                          "built without CUDA), so no GPU delay can be enqueued in this process: not installed"]
    assert (rec.installed, patches.magnitudes()) == ({}, {})  # the arm check then says no process carries it
    assert runner_module.ModelRunner.__dict__["forward"] is original
    assert gpu_delay.cuda_unavailable(types.SimpleNamespace(is_available=lambda: True)) == (
        "this torch has no torch.cuda._sleep")


def test_a_failing_delay_stops_the_patch_never_the_forward(
        runner_module: types.ModuleType, events: list, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fake_model_runner", runner_module)
    monkeypatch.setattr(patches, "GPU_DELAY", lambda: gpu_delay.cuda_sleep(FakeCuda(events, clock_khz=0)))
    rec = Recorder(tmp_path, {})
    patches.install(rec, "scheduler", {"slow-decode": 0.4})
    runner = runner_module.ModelRunner()
    assert runner.forward(Batch(decode=True)) == "logits"
    assert runner.forward(Batch(decode=True)) == "logits"
    assert events == [("forward", True), ("forward", True)]
    assert rec.counters == {}  # nothing added, nothing counted: the arm check sees zero calls
    (error,) = rec.errors
    assert error.startswith("patch slow-decode: the GPU delay failed (RuntimeError(")
    assert "cannot read the SM clock of cuda:3" in error
    assert error.endswith("it adds nothing in this process from here on")


def test_a_capturing_stream_gets_no_delay_and_says_so_once(
        runner_module: types.ModuleType, cuda: FakeCuda, events: list, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fake_model_runner", runner_module)
    rec = Recorder(tmp_path, {})
    patches.install(rec, "scheduler", {"slow-decode": 0.4})
    cuda.capturing = True
    runner = runner_module.ModelRunner()
    runner.forward(Batch(decode=True))
    runner.forward(Batch(decode=True))
    assert events == [("forward", True), ("forward", True)]
    assert rec.counters == {}
    (error,) = rec.errors
    assert "capturing a CUDA graph" in error
    cuda.capturing = False
    runner.forward(Batch(decode=True))
    assert rec.counters == {"patch_calls.slow-decode": 1.0, "patch_ms.slow-decode": 0.4}


def test_a_moved_layout_is_an_error_not_a_wrong_wrapper(runner_module: types.ModuleType, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    runner_module.ModelRunner.forward = lambda self, batch: batch  # (self, batch): not the layout the patch knows
    monkeypatch.setitem(sys.modules, "fake_model_runner", runner_module)
    rec = Recorder(tmp_path, {})
    patches.install(rec, "scheduler", {"slow-decode": 0.4})
    assert rec.errors == ["patch slow-decode: fake_model_runner.ModelRunner.forward takes (self, batch), not (self, "
                          "forward_batch, ...)"]
    assert (rec.installed, patches.magnitudes()) == ({}, {})


CHILD = """
import importlib.metadata as m, sys, types
sys.modules["sglang.srt.managers.scheduler"] = types.ModuleType("scheduler")  # SGLang loads plugins from inside it
from engine_fixtures.sglang_plugin import patches
delayed = []
class Delay:
    def __call__(self, ms):
        delayed.append(ms)
        return True
    def describe(self):
        return "fake GPU delay"
patches.GPU_UNAVAILABLE, patches.GPU_DELAY = (lambda: None), Delay
[e.load()() for e in m.entry_points(group="sglang.srt.plugins")]
print("up", flush=True)
sys.stdin.readline()
runner = types.ModuleType("sglang.srt.model_executor.model_runner")
runner.ModelRunner = type("ModelRunner", (), {"forward": lambda self, forward_batch, pp_proxy_tensors=None: 1})
sys.modules[runner.__name__] = runner  # what SGLang's TP worker does when the scheduler builds it
print("imported", flush=True)
sys.stdin.readline()
step = lambda decode: types.SimpleNamespace(forward_mode=types.SimpleNamespace(is_decode=lambda: decode))
runner.ModelRunner().forward(step(True))
runner.ModelRunner().forward(step(False))
print(delayed, flush=True)
sys.stdin.read()
"""


def test_a_scheduler_process_installs_it_once_sglang_imports_the_model_runner(tmp_path: Path) -> None:
    """Through the plugin's entry point in a child (as SGLang loads it in a scheduler), the proof thread, arms.json
    and the proof files: pending until the model runner is imported, then installed, switched live and counted."""
    from engine_fixtures.engine.proof import request_flush
    from engine_fixtures.sglang_plugin.distinfo import plugin_visible, write_dist_info

    site, proof_dir = tmp_path / "site", tmp_path / "proof"
    write_dist_info(site)
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": f"{site}:{REPO}", "PERF_ARMS_PROOF_DIR": str(proof_dir),
           "PERF_ARMS_PATCH": "slow-decode=0.4"}
    assert plugin_visible(sys.executable, env)
    child = subprocess.Popen([sys.executable, "-c", CHILD], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    assert child.stdin is not None
    assert child.stdout is not None
    try:
        assert child.stdout.readline() == "up\n"
        (p,) = request_flush(proof_dir, {child.pid}).processes
        assert p.installed["patch:slow-decode"] == ("pending: until SGLang imports "
                                                    "sglang.srt.model_executor.model_runner here")
        assert p.patch_ms_now == {"slow-decode": 0.4}  # held for the live arm meanwhile
        child.stdin.write("import\n")
        child.stdin.flush()
        assert child.stdout.readline() == "imported\n"
        (p,) = request_flush(proof_dir, {child.pid}).processes  # the proof thread installs before it answers
        assert p.installed["patch:slow-decode"].startswith("sglang.srt.model_executor.model_runner.ModelRunner."
                                                           "forward +0.4 ms")
        write_arm_file(proof_dir, LiveArm(patches=(("slow-decode", 1.0),)), seq=1)
        (p,) = request_flush(proof_dir, {child.pid}).processes
        assert (p.arm_seq, p.patch_ms_now) == (1, {"slow-decode": 1.0})
        child.stdin.write("forward\n")
        child.stdin.flush()
        assert child.stdout.readline() == "[1.0]\n"  # the decode step only, at the live arm's size
        (p,) = request_flush(proof_dir, {child.pid}).processes
        assert (p.count("patch_calls.slow-decode"), p.count("patch_ms.slow-decode")) == (1.0, 1.0)
        assert p.installed["patch:slow-decode.gpu_delay"] == "fake GPU delay"
        assert [e for e in p.errors if "patch" in e] == []  # (no SGLang here: the other hooks say so)
    finally:
        child.communicate("", timeout=10)
    assert child.returncode == 0

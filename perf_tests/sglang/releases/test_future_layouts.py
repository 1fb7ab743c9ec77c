"""A release whose layout this suite does not know (a future 0.6) is an error that names what moved and the
suite that supports what, never a skip and never a measurement of the wrong code.

Each case lays out a fake SGLang (``fake_release``) and runs the lookup in a fresh interpreter with the fake
first on the path, so these tests run with or without a real SGLang installed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from perf_tests.sglang.releases import fake_release

pytest_plugins = ("pytester",)
MM_UTILS = "sglang/srt/managers/mm_utils.py"

LOOKUP = """
import json
from engine_fixtures.transport.sglang_compat import find_shm_class
lookup = find_shm_class()
print(json.dumps({"found": lookup.cls is not None, "skip": lookup.skip_reason, "error": lookup.error,
                  "layout": lookup.layout, "version": lookup.version}))
"""


def lookup(root: Path) -> dict:
    out = fake_release.run(root, LOOKUP)
    assert isinstance(out, dict)
    return out


def assert_names_the_way_out(message: str, *needles: str) -> None:
    for needle in (*needles, "sglang-perf-suite", "supports SGLang 0.5.16..0.5.23",
                   "engine_fixtures/sglang_version.py"):
        assert needle in message, f"{needle!r} missing from: {message}"


def test_class_gone_from_mm_utils_is_an_error(tmp_path: Path) -> None:
    fake_release.write(tmp_path, "0.6.0", {MM_UTILS: "class SomethingElse:\n    pass\n"})
    out = lookup(tmp_path)
    assert (out["found"], out["skip"]) == (False, None)
    assert_names_the_way_out(out["error"], "SGLang 0.6.0 (newer than any release", "sglang.srt.managers.mm_utils has "
                             "no ShmPointerMMData")


def test_mm_utils_module_gone_is_an_error(tmp_path: Path) -> None:
    fake_release.write(tmp_path, "0.6.0", {"sglang/srt/multimodal/transport/shm.py": "X = 1\n"})
    out = lookup(tmp_path)
    assert out["skip"] is None
    assert_names_the_way_out(out["error"], "there is no module sglang.srt.managers.mm_utils")


def test_missing_dependency_is_a_skip_not_a_layout_error(tmp_path: Path) -> None:
    """A CPU box without SGLang's import-time packages skips with the fix (the envs pin them)."""
    fake_release.write(tmp_path, "0.5.23", {MM_UTILS: "import a_dependency_this_box_lacks\n"})
    out = lookup(tmp_path)
    assert out["error"] is None
    assert "No module named 'a_dependency_this_box_lacks'" in out["skip"]
    assert "constraints/sglang-cpu-<version>.txt" in out["skip"]


def test_known_layout_is_found(tmp_path: Path) -> None:
    fake_release.write(tmp_path, "0.5.23", {MM_UTILS: fake_release.shm_module()})
    out = lookup(tmp_path)
    assert (out["found"], out["error"], out["skip"], out["layout"], out["version"]) == (True, None, None, "0.5.16",
                                                                                          "0.5.23")


COPY_ARMS = """
import json
from engine_fixtures.errors import ConfigError
from engine_fixtures.transport.sglang_compat import apply_copy_arm, find_shm_class
cls = find_shm_class().cls
out = {}
for arm in ("torch", "buffer"):
    try:
        apply_copy_arm(cls, arm)
        out[arm] = "applied"
    except ConfigError as exc:
        out[arm] = str(exc)
print(json.dumps(out))
"""


def test_changed_copy_lines_stop_both_copy_arms(tmp_path: Path) -> None:
    """An ``__init__`` that copies differently: neither 'torch' (named after the old lines) nor 'buffer' (their
    rewrite) may run, or the A/B would compare something other than what it names."""
    fake_release.write(tmp_path, "0.6.0", {MM_UTILS: fake_release.shm_module(fake_release.CHANGED_COPY)})
    out = fake_release.run(tmp_path, COPY_ARMS)
    assert isinstance(out, dict)
    for arm in ("torch", "buffer"):
        assert_names_the_way_out(out[arm], "ShmPointerMMData.__init__ has the torch copy lines 0 times")


def test_unchanged_copy_lines_take_both_arms(tmp_path: Path) -> None:
    fake_release.write(tmp_path, "0.5.20", {MM_UTILS: fake_release.shm_module()})
    assert fake_release.run(tmp_path, COPY_ARMS) == {"torch": "applied", "buffer": "applied"}


IPC_PROBE = """
import json, tempfile
from pathlib import Path
from engine_fixtures.sglang_plugin.arm_state import LiveState
from engine_fixtures.sglang_plugin.instrument import install_copy_dispatch, install_ipc_probe
from engine_fixtures.sglang_plugin.proof_file import Recorder
from engine_fixtures.transport.live import LiveArm
rec = Recorder(Path(tempfile.mkdtemp()), {}, live=LiveState(LiveArm(copy="buffer")))
install_ipc_probe(rec)
install_copy_dispatch(rec)
print(json.dumps({"errors": rec.errors, "installed": rec.installed, "arm_errors": rec.live.arm_errors}))
"""


def test_engine_plugin_records_what_moved(tmp_path: Path) -> None:
    """Inside the engine the plugin never raises into SGLang: the proof carries the error, and the arm check
    (``engine.proof.assert_arm``) fails the test on it instead of timing code that is not there."""
    fake_release.write(tmp_path, "0.6.0", {MM_UTILS: fake_release.shm_module(fake_release.CHANGED_COPY),
                                           "sglang/srt/multimodal/transport/cuda_ipc.py": "class Pool:\n    pass\n"})
    out = fake_release.run(tmp_path, IPC_PROBE)
    assert isinstance(out, dict)
    ipc, copy = out["errors"]
    assert_names_the_way_out(ipc, "ipc: SGLang 0.6.0", "no CudaIpcTensorTransportProxy in the modules this suite "
                             "knows", "sglang.srt.multimodal.transport.cuda_ipc", "sglang.srt.utils.cuda_ipc_transport")
    assert_names_the_way_out(copy, "copy=buffer cannot be built from sglang.srt.managers.mm_utils.ShmPointerMMData",
                             "torch copy lines 0 times")
    assert out["arm_errors"] == [copy]  # and the live arm says it cannot run, as every switch to it would
    assert out["installed"]["copy_impl.stock"] == "torch"  # SGLang's own code still runs, labelled by its code
    assert "ipc_rebuild_probe" not in out["installed"]


def processor_module(wrap_body: str, module_flag: bool = False) -> str:
    """A fake ``base_processor`` whose ``_wrap_tensor_for_cuda_ipc`` reads the cache flag as ``wrap_body`` does."""
    return ("_IPC_POOL_HANDLE_CACHE = False\n" if module_flag else "") + (
        "class BaseMultimodalProcessor:\n"
        "    def _wrap_tensor_for_cuda_ipc(self, tensor):\n"
        f"        return {wrap_body}\n")


ENVIRON = ("class _Flag:\n    default = True\n    def get(self):\n        return True\n\n"
           "class _Envs:\n    SGLANG_USE_IPC_POOL_HANDLE_CACHE = _Flag()\n\nenvs = _Envs()\n")
IPC_SWITCH = """
import json, tempfile
from pathlib import Path
from engine_fixtures.sglang_plugin.arm_state import LiveState
from engine_fixtures.sglang_plugin.ipc_switch import install_ipc_switch
from engine_fixtures.sglang_plugin.proof_file import Recorder
from engine_fixtures.transport.live import LiveArm
rec = Recorder(Path(tempfile.mkdtemp()), {}, live=LiveState(LiveArm(ipc_cache="off")))
install_ipc_switch(rec)
print(json.dumps({"errors": rec.errors, "installed": rec.installed, "arm_errors": rec.live.arm_errors}))
"""
PROCESSOR = "sglang/srt/multimodal/processors/base_processor.py"


@pytest.mark.parametrize(("version", "wrap", "module_flag", "layout"), [
    ("0.5.16", "_IPC_POOL_HANDLE_CACHE", True, "module-global"),
    ("0.5.23", "self.use_ipc_pool_handle_cache", False, "processor-attribute"),
])
def test_ipc_switch_takes_the_dated_layout(tmp_path: Path, version: str, wrap: str, module_flag: bool,
                                           layout: str) -> None:
    fake_release.write(tmp_path, version, {PROCESSOR: processor_module(wrap, module_flag),
                                           "sglang/srt/environ.py": ENVIRON})
    out = fake_release.run(tmp_path, IPC_SWITCH)
    assert isinstance(out, dict)
    assert (out["errors"], out["arm_errors"]) == ([], [])
    assert out["installed"]["ipc_cache_layout"] == layout
    assert out["installed"]["ipc_cache_stock"] == "on"  # launched with off: stock is the release's default


@pytest.mark.parametrize(("version", "wrap", "module_flag", "needle"), [
    ("0.6.0", "self.pool_handle_policy", False, "reads neither the module global _IPC_POOL_HANDLE_CACHE nor "
                                                "self.use_ipc_pool_handle_cache"),
    ("0.5.20", "_IPC_POOL_HANDLE_CACHE", True, "reads the module-global flag, but this release is dated to read "
                                               "the processor-attribute flag"),
])
def test_ipc_switch_on_an_unknown_layout_is_an_error_never_a_no_op(tmp_path: Path, version: str, wrap: str,
                                                                   module_flag: bool, needle: str) -> None:
    fake_release.write(tmp_path, version, {PROCESSOR: processor_module(wrap, module_flag),
                                           "sglang/srt/environ.py": ENVIRON})
    out = fake_release.run(tmp_path, IPC_SWITCH)
    assert isinstance(out, dict)
    (error,) = out["errors"]
    assert_names_the_way_out(error, "ipc_cache=off: not switched", needle)
    assert out["arm_errors"] == [error.replace("not switched", "not switched here")]
    assert "ipc_cache_layout" not in out["installed"]


def test_a_marked_test_errors_where_the_layout_moved(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    fake_release.write(tmp_path / "fake", "0.6.0", {MM_UTILS: "class SomethingElse:\n    pass\n"})
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "fake"))
    pytester.makepyfile("import pytest\n\n@pytest.mark.sglang\ndef test_x():\n    pass\n\ndef test_y():\n    pass\n")
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*ConfigError: SGLang 0.6.0 (newer than any release this suite was checked "
                                 "against): sglang.srt.managers.mm_utils has no ShmPointerMMData*"])


def test_required_release_missing_stops_the_session(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:
    fake_release.write(tmp_path / "fake", "0.5.23", {MM_UTILS: fake_release.shm_module()})
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "fake"))
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess("--perf-require-sglang", "0.5.20")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--perf-require-sglang 0.5.20: this environment has SGLang 0.5.23; install that "
                                 "release*"])
    pytester.runpytest_subprocess("--perf-require-sglang", "0.5.23").assert_outcomes(passed=1)


DEFERRED = """
import importlib, json, sys, tempfile
from pathlib import Path
from engine_fixtures.sglang_plugin.arm_state import LiveState
from engine_fixtures.sglang_plugin.ipc_switch import defer_ipc_switch
from engine_fixtures.sglang_plugin.proof_file import Recorder
from engine_fixtures.transport.live import LiveArm
MODULE = "sglang.srt.multimodal.processors.base_processor"
rec = Recorder(Path(tempfile.mkdtemp()), {}, live=LiveState(LiveArm(ipc_cache="off")))
defer_ipc_switch(rec)
(attempt,) = rec.deferred
out = {"imported_by_plugin": MODULE in sys.modules, "before": attempt()}
rec.live.switch(1, LiveArm(ipc_cache="on"))
out["early"] = list(rec.live.arm_errors)
importlib.import_module(MODULE)  # what SGLang's tokenizer manager does when it builds its processor
out["after"] = attempt()
rec.live.switch(2, LiveArm(ipc_cache="on"))
out.update(late=rec.live.arm_errors, layout=rec.installed.get("ipc_cache_layout"))
print(json.dumps(out))
"""


def test_ipc_switch_waits_for_sglang_to_import_its_processors(tmp_path: Path) -> None:
    """The plugin imports none of SGLang's processors (they read the environment at import, before the server has
    resolved it); a switch before SGLang imported them is an error there, not a silent no-op."""
    fake_release.write(tmp_path, "0.5.23", {PROCESSOR: processor_module("self.use_ipc_pool_handle_cache"),
                                            "sglang/srt/environ.py": ENVIRON})
    out = fake_release.run(tmp_path, DEFERRED)
    assert isinstance(out, dict)
    assert (out["imported_by_plugin"], out["before"], out["after"]) == (False, False, True)
    assert out["early"] == ["ipc_cache=on: not switched yet: SGLang has not imported "
                            "sglang.srt.multimodal.processors.base_processor in this process (no processor yet), so "
                            "it still runs the launch arm's value"]
    assert (out["late"], out["layout"]) == ([], "processor-attribute")


SCHEDULER = "sglang/srt/managers/scheduler.py"
RUNNING_PROBE = """
import importlib, json, tempfile
from pathlib import Path
from engine_fixtures.sglang_plugin.instrument import RUNNING_PROBE, install_running_probe
from engine_fixtures.sglang_plugin.proof_file import Recorder
importlib.import_module("sglang.srt.managers.scheduler")  # a scheduler process loads the plugin from inside it
rec = Recorder(Path(tempfile.mkdtemp()), {})
install_running_probe(rec)
print(json.dumps({"errors": rec.errors, "installed": rec.installed.get(RUNNING_PROBE)}))
"""


@pytest.mark.parametrize(("scheduler", "moved"), [
    ("class Scheduler:\n    def run_batch(self, forward_batch, pp_proxy_tensors=None):\n        pass\n",
     "sglang.srt.managers.scheduler.Scheduler.run_batch takes (self, forward_batch, pp_proxy_tensors), not (self, "
     "batch, ...)"),
    ("class Scheduler:\n    def run_step(self, batch):\n        pass\n",
     "there is no sglang.srt.managers.scheduler.Scheduler.run_batch"),
])
def test_running_probe_on_a_moved_scheduler_is_an_error_never_a_silent_zero(tmp_path: Path, scheduler: str,
                                                                            moved: str) -> None:
    """A scheduler whose ``run_batch`` moved or changed its signature: the proof carries the error (every arm check
    fails on it) instead of counting nothing, and the segment would refuse a zero count anyway."""
    fake_release.write(tmp_path, "0.6.0", {SCHEDULER: scheduler})
    out = fake_release.run(tmp_path, RUNNING_PROBE)
    assert isinstance(out, dict)
    (error,) = out["errors"]
    assert_names_the_way_out(error, "running: SGLang 0.6.0", moved, "so running requests cannot be counted")
    assert out["installed"] is None


def test_running_probe_takes_the_known_layout(tmp_path: Path) -> None:
    fake_release.write(tmp_path, "0.5.23", {SCHEDULER: "class Scheduler:\n    def run_batch(self, batch, "
                                                       "pp_proxy_tensors=None):\n        return batch\n"})
    out = fake_release.run(tmp_path, RUNNING_PROBE)
    assert out == {"errors": [], "installed": "sglang.srt.managers.scheduler.Scheduler.run_batch"}

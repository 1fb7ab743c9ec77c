"""The engine fixture's version-dependent pieces against the INSTALLED release's own code (no GPU needed).

Run by each per-version env (``tox -e sglang0516-cpu,sglang0520-cpu,sglang0523-cpu``, which also passes
``--perf-require-sglang``); marked ``sglang``, so elsewhere they skip with the reason. Each test checks one fact
that ``engine_fixtures.sglang_version`` dates by release against what this release really ships: a wrong fact
there fails here in the env of the release that contradicts it.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import importlib.util
import inspect
import pickle
import textwrap
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engine_fixtures import sglang_version as sv
from engine_fixtures.engine.server_info import EffectiveConfig
from engine_fixtures.engine.spec import EngineSpec
from engine_fixtures.errors import ConfigError
from engine_fixtures.transport import sglang_compat
from perf_tests.sglang.releases import server_info_samples

pytestmark = pytest.mark.sglang
INSTALLED = sv.installed()
VERSION = sv.parse(INSTALLED)
MODEL = Path("/models/qwen-tiny")


def sglang_module(name: str) -> Any:
    with warnings.catch_warnings():  # SGLang's import chain warns; the suite turns warnings into errors
        warnings.simplefilter("ignore")
        return importlib.import_module(name)


def test_shm_class_layout_is_the_one_dated_for_this_release() -> None:
    lookup = sglang_compat.find_shm_class()
    assert lookup.cls is not None, lookup.reason
    assert lookup.layout == sv.expected_shm_layout(VERSION), f"sglang {INSTALLED}: {lookup.reason}"


def test_copy_lines_are_there_exactly_while_the_copy_regression_is_declared() -> None:
    """The static half of the SHM_COPY marker (the mechanism env measures the other half): this release's
    ``__init__`` holds the torch copy lines once iff ``SHM_COPY`` says the release ships them."""
    cls = sglang_compat.find_shm_class().cls
    source = inspect.getsource(sglang_compat.original_init(cls))
    try:
        sglang_compat.rewrite_copy_source(textwrap.dedent(source))
        has_torch_copy = True
    except ConfigError:
        has_torch_copy = False
    assert has_torch_copy is sv.shm_copy_unfixed(VERSION), (
        f"sglang {INSTALLED}: torch copy lines present={has_torch_copy}, SHM_COPY {sv.SHM_COPY.range_text}")


@pytest.mark.parametrize(("arm", "label"), [("stock", "torch"), ("torch", "torch"), ("buffer", "buffer")])
def test_engine_plugin_labels_the_copy_this_release_runs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                         arm: str, label: str) -> None:
    """The engine plugin's copy dispatcher on this release's own class: installed, every arm built from SGLang's
    source and labelled by the code it calls (stock is SGLang's torch copy while SHM_COPY holds), a copy on the
    launch arm counted once under its label and seq 0."""
    import torch

    from engine_fixtures.sglang_plugin.arm_state import LiveState
    from engine_fixtures.sglang_plugin.instrument import SHM_MODULE_ENV, install_copy_dispatch
    from engine_fixtures.sglang_plugin.proof_file import Recorder
    from engine_fixtures.transport.live import LiveArm

    cls = sglang_compat.find_shm_class().cls
    monkeypatch.setattr(cls, "__init__", cls.__dict__["__init__"])  # undone after the test
    monkeypatch.delenv(SHM_MODULE_ENV, raising=False)
    rec = Recorder(tmp_path, {"copy": arm}, live=LiveState(LiveArm(copy=arm)))
    install_copy_dispatch(rec)
    assert (rec.errors, rec.live.arm_errors) == ([], [])
    assert rec.installed[f"copy_impl.{arm}"] == label
    tensor = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    assert torch.equal(pickle.loads(pickle.dumps(cls(tensor))).materialize(), tensor)  # unlinks the segment
    assert rec.counters[f"shm_copies_{label}"] == rec.counters[f"seq.0.shm_copies_{label}"] == 1


class FakeProxy:
    """Stands in for the CUDA IPC proxy SGLang builds (named like it: the switch counts proxies by that name)."""

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs

    @property
    def cached(self) -> bool:
        if "use_pool_handle_cache" in self.kwargs:  # 0.5.18+: the pool's wrap_tensor kwarg
            return bool(self.kwargs["use_pool_handle_cache"])
        return self.kwargs["pool_ipc_handle"] is not None  # 0.5.16, 0.5.17: the pool handle is sent or not


FakeProxy.__name__ = sv.CUDA_IPC_PROXY_CLASS


class FakePool:
    """The tokenizer manager's CUDA IPC pool, as far as ``_wrap_tensor_for_cuda_ipc`` uses it in any release."""

    _pool_ipc_handle = ("pool-handle",)
    _pool_device_index = 0

    def return_a_slice_tensor_with_flag(self, tensor: Any) -> tuple[Any, Any, int]:
        import torch

        return object(), torch.zeros(8, dtype=torch.int8), 0

    def wrap_tensor(self, tensor: Any, *, use_pool_handle_cache: bool) -> FakeProxy:
        return FakeProxy(use_pool_handle_cache=use_pool_handle_cache)


@pytest.mark.parametrize("launch", ["stock", "off"])
def test_ipc_cache_switch_changes_what_this_release_sends(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                          launch: str) -> None:
    """The live IPC pool-handle cache switch on this release's own ``_wrap_tensor_for_cuda_ipc`` (its CUDA pieces
    replaced by stand-ins): the layout is the dated one, and on / off / stock change whether the proxy SGLang builds
    carries the pool handle, counted per seq. Stock is the release's own value: what it computes from the launch
    environment for an engine launched as shipped (here the variable set against the default), else the default."""
    import torch

    from engine_fixtures.sglang_plugin.arm_state import LiveState
    from engine_fixtures.sglang_plugin.ipc_switch import install_ipc_switch
    from engine_fixtures.sglang_plugin.proof_file import Recorder
    from engine_fixtures.transport.live import LiveArm

    module = sglang_module(sv.MM_PROCESSOR_MODULE)
    cls = getattr(module, sv.MM_PROCESSOR_CLASS)
    monkeypatch.setattr(cls, sv.IPC_WRAP_METHOD, cls.__dict__[sv.IPC_WRAP_METHOD])  # undone after the test
    if hasattr(module, sv.IPC_CACHE_GLOBAL):
        monkeypatch.setattr(module, sv.IPC_CACHE_GLOBAL, getattr(module, sv.IPC_CACHE_GLOBAL))
    monkeypatch.setattr(module, sv.CUDA_IPC_PROXY_CLASS, FakeProxy, raising=False)
    default = bool(getattr(sglang_module(sv.ENVIRON_MODULE).envs, sv.IPC_CACHE_ENV).default)
    monkeypatch.setenv(sv.IPC_CACHE_ENV, "0" if default else "1")  # the launch environment's value: not the default
    rec = Recorder(tmp_path, {}, live=LiveState(LiveArm(ipc_cache=launch)))
    install_ipc_switch(rec)
    assert (rec.errors, rec.live.arm_errors) == ([], [])
    assert rec.installed["ipc_cache_layout"] == sv.expected_ipc_cache_layout(VERSION)
    stock = (not default) if launch == "stock" else default
    assert rec.installed["ipc_cache_stock"] == ("on" if stock else "off")
    bare = type("Processor", (cls,), dict.fromkeys(cls.__abstractmethods__, lambda *_a, **_k: None))
    processor = object.__new__(bare)
    processor.cudaipc_mmfeature_pool = FakePool()
    processor.use_cuda_ipc, processor.keep_mm_feature_on_device = True, False
    processor.use_ipc_pool_handle_cache = not stock  # the switch, not this, decides what is sent
    feature = type("CudaTensor", (), {"is_cuda": True, "view": lambda self, *_: torch.zeros(8, dtype=torch.int8)})()
    for seq, (arm, cached) in enumerate((("on", True), ("off", False), ("stock", stock), ("on", True)), start=1):
        rec.live.switch(seq, LiveArm(ipc_cache=arm))
        proxy = getattr(processor, sv.IPC_WRAP_METHOD)(feature)
        assert isinstance(proxy, FakeProxy)
        assert proxy.cached is cached, f"ipc_cache={arm}: sglang {INSTALLED} sent {proxy.kwargs}"
        assert rec.counters[f"seq.{seq}.ipc_proxies_cache_{'on' if cached else 'off'}"] == 1


def test_ipc_cache_default_is_the_one_the_marker_assumes() -> None:
    """The IPC_CACHE_OFF marker of the GPU tier, checked on a CPU box: the release's own default."""
    envs = sglang_module("sglang.srt.environ").envs
    default = envs.SGLANG_USE_IPC_POOL_HANDLE_CACHE.default
    assert bool(default) is not sv.ipc_cache_off_by_default(VERSION), (
        f"sglang {INSTALLED} defaults SGLANG_USE_IPC_POOL_HANDLE_CACHE to {default!r}; IPC_CACHE_OFF covers "
        f"{sv.IPC_CACHE_OFF.range_text}")


def test_env_the_spec_sets_names_variables_this_release_reads() -> None:
    envs = sglang_module("sglang.srt.environ").envs
    spec = EngineSpec(MODEL, mm_feature_transport="cuda_ipc", ipc_cache="on")
    for name in [k for k in spec.env(INSTALLED) if k.startswith("SGLANG_")]:
        assert hasattr(envs, name), f"sglang {INSTALLED} has no environment variable {name}"


def test_cuda_ipc_proxy_is_defined_where_the_plugin_looks(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import torch

    from engine_fixtures.sglang_plugin.instrument import REBUILD_METHODS, install_ipc_probe
    from engine_fixtures.sglang_plugin.proof_file import Recorder

    canonical = sv.cuda_ipc_module(VERSION)
    proxy = getattr(sglang_module(canonical), sv.CUDA_IPC_PROXY_CLASS)
    assert proxy.__module__ == canonical
    # install_ipc_probe patches these in place; monkeypatch puts the originals back after the test
    monkeypatch.setattr(torch.UntypedStorage, "_new_shared_cuda", torch.UntypedStorage._new_shared_cuda)
    for meth in REBUILD_METHODS:
        if meth in proxy.__dict__:
            monkeypatch.setattr(proxy, meth, proxy.__dict__[meth])
    rec = Recorder(tmp_path, {})
    install_ipc_probe(rec)
    assert rec.errors == []
    assert rec.installed["ipc_rebuild_probe"] in sv.CUDA_IPC_MODULES
    assert "reconstruct_on_target_device" in proxy.__dict__


def release_parser() -> argparse.ArgumentParser:
    server_args = sglang_module("sglang.srt.server_args")
    parser = argparse.ArgumentParser(prog="sglang serve", exit_on_error=False)
    server_args.ServerArgs.add_cli_args(parser)
    return parser


SPECS = {
    "cpu-torch": EngineSpec(MODEL, copy="torch"),
    "cpu-stock-quota": EngineSpec(MODEL, copy="stock", cpu_quota=4.0),
    "cuda_ipc-off": EngineSpec(MODEL, mm_feature_transport="cuda_ipc", ipc_cache="off"),
    "pp2-capped": EngineSpec(MODEL, pp=2, gpus=(0, 1), pp_max_micro_batch_size=32, max_running_requests=64,
                             pp_async_batch_depth=1),
}


@pytest.mark.parametrize("name", SPECS)
def test_engine_argv_is_accepted_by_this_release_parser(name: str) -> None:
    """``EngineSpec.argv`` for this release, parsed by the release's own ``ServerArgs.add_cli_args`` parser:
    every flag exists and every value is a valid choice (what ``sglang.launch_server`` does first)."""
    spec = SPECS[name]
    argv = spec.argv("python", 31000, INSTALLED)
    args, unknown = release_parser().parse_known_args(argv[len(spec.launcher) + 1:])
    assert unknown == [], f"sglang {INSTALLED} does not know {unknown}"
    assert args.mm_feature_transport == spec.mm_feature_transport
    assert args.pp_size == spec.pp


def test_preprocess_cache_flag_exists_exactly_where_dated() -> None:
    flags = {opt for action in release_parser()._actions for opt in action.option_strings}
    assert ("--mm-preprocess-cache-size-mb" in flags) is sv.has_preprocess_cache_flag(VERSION), (
        f"sglang {INSTALLED}: PREPROCESS_CACHE_FLAG is {sv.PREPROCESS_CACHE_FLAG}")


def source_of(module: str) -> str:
    """A module's source, read from its file (not imported: the scheduler's imports want a GPU)."""
    spec = importlib.util.find_spec(module)
    assert spec is not None, f"sglang {INSTALLED} has no module {module}"
    assert spec.origin, f"{module} has no source file"
    return Path(spec.origin).read_text()


def class_def(module: str, name: str) -> ast.ClassDef:
    """The ``class`` statement ``name`` at the top of ``module``'s source."""
    found = [n for n in ast.parse(source_of(module)).body if isinstance(n, ast.ClassDef) and n.name == name]
    assert found, f"sglang {INSTALLED}: no class {name} in {module}"
    return found[0]


def assert_method(module: str, cls: str, method: str, problem_of: Callable[[list[str]], str | None]) -> None:
    """``module.cls`` defines ``method`` (not a mixin's) with the parameters a wrapper relies on (``problem_of``)."""
    methods = {f.name: f for f in class_def(module, cls).body if isinstance(f, ast.FunctionDef)}
    assert method in methods, f"sglang {INSTALLED}: {cls} has no {method}"
    args = methods[method].args
    problem = problem_of([a.arg for a in (*args.posonlyargs, *args.args)])
    assert problem is None, f"sglang {INSTALLED}: {cls}.{method} {problem}"


def test_running_probe_wraps_the_method_this_release_runs_every_batch_with() -> None:
    """The running-batch probe's layout in this release's source (read, not imported: the scheduler's imports want a
    GPU): ``Scheduler.run_batch`` with the parameters the probe relies on, defined in the scheduler module (no
    mixin's); ``run_scheduler_process`` loads the plugins from inside that module, so it is imported when the probe
    installs; the batch has ``reqs`` and ``forward_mode``, whose ``ForwardMode`` has ``is_decode`` and ``is_mixed``."""
    assert_method(sv.SCHEDULER_MODULE, sv.SCHEDULER_CLASS, sv.RUN_BATCH_METHOD, sv.run_batch_problem)
    (run,) = [n for n in ast.parse(source_of(sv.SCHEDULER_MODULE)).body
              if isinstance(n, ast.FunctionDef) and n.name == "run_scheduler_process"]
    calls: dict[str, int] = {}
    for c in ast.walk(run):
        if isinstance(c, ast.Call) and isinstance(c.func, ast.Name):
            calls[c.func.id] = min(c.lineno, calls.get(c.func.id, c.lineno))
    # Before the Scheduler exists: 0.5.23 wraps the instance's bound run_batch (forward-pass metrics), so the class
    # must carry the probe by then.
    assert calls.get("load_plugins", 1 << 30) < calls.get(sv.SCHEDULER_CLASS, 0), (
        f"sglang {INSTALLED}: run_scheduler_process calls {sorted(calls)}")
    batch = class_def("sglang.srt.managers.schedule_batch", "ScheduleBatch")
    fields = {n.target.id for n in batch.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    assert {"reqs", "forward_mode"} <= fields, f"sglang {INSTALLED}: ScheduleBatch fields {sorted(fields)}"
    mode = class_def("sglang.srt.model_executor.forward_batch_info", "ForwardMode")
    assert {"is_decode", "is_mixed"} <= {f.name for f in mode.body if isinstance(f, ast.FunctionDef)}


def test_decode_patch_wraps_the_method_this_release_runs_every_batch_with() -> None:
    """The ``slow-decode`` patch's layout in this release's source (read, not imported): ``ModelRunner.forward`` with
    the parameters the patch relies on, defined in the model-runner module, checking ``forward_mode.is_decode()``
    itself; the TP worker calls it per batch and imports the module inside a function (so the plugin, which loads
    before the scheduler builds its worker, waits for that import); ``ForwardMode`` has ``is_decode``."""
    assert_method(sv.MODEL_RUNNER_MODULE, sv.MODEL_RUNNER_CLASS, sv.MODEL_FORWARD_METHOD, sv.model_forward_problem)
    assert "forward_batch.forward_mode.is_decode()" in source_of(sv.MODEL_RUNNER_MODULE)
    worker = source_of("sglang.srt.managers.tp_worker")
    assert "self.model_runner.forward(" in worker, f"sglang {INSTALLED}: the TP worker no longer calls it"
    lazy = [n for n in ast.walk(ast.parse(worker)) if isinstance(n, ast.FunctionDef) for i in ast.walk(n)
            if isinstance(i, ast.ImportFrom) and i.module == sv.MODEL_RUNNER_MODULE]
    assert lazy, f"sglang {INSTALLED}: tp_worker imports {sv.MODEL_RUNNER_MODULE} only at module level now"
    mode = class_def("sglang.srt.model_executor.forward_batch_info", "ForwardMode")
    assert "is_decode" in {f.name for f in mode.body if isinstance(f, ast.FunctionDef)}


def server_args_fields() -> set[str]:
    cls = sglang_module("sglang.srt.server_args").ServerArgs
    if dataclasses.is_dataclass(cls):
        return {f.name for f in dataclasses.fields(cls)}
    return {f.name for f in sglang_module("sglang.srt.arg_groups.arg_utils").record_fields(cls)}


def test_server_info_keys_are_this_release_fields() -> None:
    """The reconstructed ``/server_info`` samples name only server-args fields this release has, and the
    scheduler keys the parser reads are in the release's source."""
    fields = server_args_fields()
    missing = set(server_info_samples.SERVER_ARGS) - fields
    assert not missing, f"sglang {INSTALLED} ServerArgs has no {sorted(missing)}"
    scheduler = source_of("sglang.srt.managers.scheduler")
    state = scheduler
    if "self.internal_state.get_internal_state(" in scheduler:  # 0.5.23: a component holds it
        state = source_of("sglang.srt.managers.scheduler_components.internal_state")
    assert '"effective_max_running_requests_per_dp"' in state
    assert '"max_total_num_tokens": self.max_total_num_tokens' in scheduler
    assert '"pp_max_micro_batch_size"' in scheduler or "pp_max_micro_batch_size=" in scheduler


@pytest.mark.skipif(INSTALLED not in server_info_samples.RELEASES,
                    reason=f"no reconstructed /server_info for SGLang {INSTALLED}")
def test_server_info_sample_of_this_release_parses() -> None:
    cfg = EffectiveConfig.parse(server_info_samples.sample(INSTALLED or ""))
    assert {k: getattr(cfg, k) for k in server_info_samples.EXPECTED} == server_info_samples.EXPECTED


def test_plugin_group_is_the_one_this_release_loads() -> None:
    plugins = sglang_module("sglang.srt.plugins")
    assert plugins.GENERAL_PLUGINS_GROUP == sv.PLUGIN_GROUP

"""Install the variant arms inside an SGLang process and count what really runs.

- copy arms, switched live: ``install_copy_dispatch`` keeps SGLang's own ``ShmPointerMMData.__init__`` (``stock``),
  the ``torch`` arm (SGLang's, checked to still copy with torch) and the ``buffer`` arm (built from SGLang's source by
  ``transport.sglang_compat``) side by side, and installs one dispatcher that picks by the live arm at each call
  (``arm_state.LiveState.entered``). Each copy is counted under the label of the code it really ran
  (``classify_copy``: by the bytecode, never by the request), ``shm_copies_<label>`` / ``shm_copy_s_<label>``, and
  under the live arm's seq, ``seq.<seq>.shm_copies_<label>``, so a proof says which arm served which copies. An arm
  whose implementation cannot be built here runs SGLang's own code (counted under its own label) and is an
  ``arm_errors`` entry; the launch arm's is an error.
- thread cap: ``torch.set_num_threads(n)`` runs inside the dispatcher, on the thread that copies (OpenMP's count is
  per calling thread), when the live arm's ``threads`` differs from ``torch.get_num_threads()`` there; ``threads=None``
  restores the count that thread had at the first copy the plugin saw (``installed["copy_threads_launch"]``). Every
  copy is counted under the count it ran with, ``copies_threads.<n>``.
- IPC probe: ``torch.UntypedStorage._new_shared_cuda`` (one call = one IPC handle open) and the proxy's
  ``reconstruct_on_target_device`` / ``borrow_on_target_device`` (count and time per rebuild).
- running-batch probe: ``Scheduler.run_batch`` (``sglang_version.SCHEDULER_MODULE``), in the scheduler processes,
  counts each decode or mixed batch by its number of requests, ``running_batch.<n>`` += 1 (``Recorder.tally``: a dict
  increment under the lock, no I/O), read before the call and never changing it. A decode batch is every running
  request of the (micro-)batch, the number SGLang's "Decode batch, #running-req" log prints every
  ``--decode-log-interval`` steps; a mixed batch (``--enable-mixed-chunk``) is those plus a prefill chunk. A prefill
  (extend) batch holds only the requests being admitted, never the running ones, so it is not counted. Not per arm
  seq: the segment's two proofs bracket one arm's visit, and no arm check reads it.

``PERF_ARMS_SHM_MODULE`` names another module to take ``ShmPointerMMData`` from: the stub engine's stand-in
(``perf_tests.support.stub_copy``), and ``PERF_ARMS_SCHEDULER_MODULE`` another scheduler module (the stub's
``perf_tests.support.stub_scheduler``), for the self-tests only; ``EngineSpec`` never sets them.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import sys
import time
import types
from collections.abc import Callable
from typing import Any

from engine_fixtures import sglang_version
from engine_fixtures.sglang_plugin.proof_file import Recorder
from engine_fixtures.transport.arms import COPY_ARMS

MM_UTILS = sglang_version.MM_UTILS_MODULE
SHM_MODULE_ENV = "PERF_ARMS_SHM_MODULE"  # self-tests only: the stub engine's stand-in module
IPC_MODULES = sglang_version.CUDA_IPC_MODULES
REBUILD_METHODS = ("reconstruct_on_target_device", "borrow_on_target_device")
SCHEDULER_MODULE_ENV = "PERF_ARMS_SCHEDULER_MODULE"  # self-tests only: the stub engine's stand-in scheduler module
RUNNING_BATCH = "running_batch."  # + n: one decode (or mixed) batch of n requests run by this process's scheduler
RUNNING_PROBE = "running_probe"  # Recorder.installed: the method the probe wraps, or why there is none here


def _unsupported(what: str) -> str:
    """``what``, and where SGLang is installed, the release, what this suite supports and the way out."""
    version = sglang_version.installed()
    return what if version is None else sglang_version.unsupported(what, version)


def _code_names(fn: Callable[..., Any], depth: int = 2) -> set[str]:
    """Global/attribute names used by ``fn`` and, ``depth`` levels down, by the functions it names."""
    fn = getattr(fn, "__func__", fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return set()
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= set(const.co_names)
    if depth > 0:
        glb = getattr(fn, "__globals__", {})
        for name in list(names):
            callee = glb.get(name)
            if isinstance(callee, types.FunctionType):
                names |= _code_names(callee, depth - 1)
    return names


def classify_copy(init: Callable[..., Any]) -> str:
    """``torch`` (``frombuffer(...).copy_``), ``buffer`` (memoryview assignment from numpy) or ``unknown``.

    An explicit ``__perf_copy_arm__`` attribute (set only by our own counter) wins; otherwise the bytecode of
    the innermost function (following ``__wrapped__``) decides, never a label set by the patcher.
    """
    label = getattr(init, "__perf_copy_arm__", None)
    if label in COPY_ARMS:
        return str(label)
    seen = 0
    while hasattr(init, "__wrapped__") and seen < 8:  # through counting wrappers to the code that copies
        init, seen = init.__wrapped__, seen + 1
    names = _code_names(init)
    if "copy_" in names and "frombuffer" in names:
        return "torch"
    if "numpy" in names or "tobytes" in names:
        return "buffer"
    return "unknown"


class _ThreadCap:
    """Sets the calling thread's torch thread count to the live arm's cap (None: the count at the first copy)."""

    def __init__(self, rec: Recorder) -> None:
        self.rec = rec
        self.launch: int | None = None

    def apply(self, threads: int | None) -> int:
        import torch  # loaded: the copy's argument is a tensor

        if self.launch is None:
            self.launch = torch.get_num_threads()
            self.rec.installed["copy_threads_launch"] = str(self.launch)
        want = threads if threads is not None else self.launch
        if torch.get_num_threads() != want:
            torch.set_num_threads(want)
        return int(torch.get_num_threads())


def install_copy_dispatch(rec: Recorder) -> None:
    """Install the live copy dispatcher on SGLang's SHM producer class. Failures are recorded, never raised."""
    from engine_fixtures.transport.sglang_compat import buffer_copy_init, check_torch_copy, original_init

    module = os.environ.get(SHM_MODULE_ENV) or MM_UTILS
    try:
        cls = getattr(importlib.import_module(module), sglang_version.SHM_CLASS)
    except Exception as exc:  # an SGLang without the class: the proof shows it, and the arm check fails on it
        rec.errors.append("copy: " + _unsupported(f"cannot import {module}.{sglang_version.SHM_CLASS} ({exc!r})"))
        return
    if getattr(cls.__dict__.get("__init__"), "__perf_copy_dispatch__", False):
        return  # already installed in this process
    original = original_init(cls)
    impls: dict[str, Callable[..., Any]] = {"stock": original}  # stock: SGLang's own copy, counted as its code says
    unavailable: dict[str, str] = {}
    for arm, build in (("torch", check_torch_copy), ("buffer", buffer_copy_init)):
        try:
            impls[arm] = build(original)
        except Exception as exc:
            unavailable[arm] = f"copy={arm} cannot be built from {module}.{sglang_version.SHM_CLASS}: {exc}"
            rec.installed[f"copy_unavailable.{arm}"] = unavailable[arm]
    labels = {arm: classify_copy(fn) for arm, fn in impls.items()}
    for arm, label in labels.items():
        rec.installed[f"copy_impl.{arm}"] = label
    cap = _ThreadCap(rec)

    @functools.wraps(original)
    def dispatched_init(self: Any, *args: Any, **kwargs: Any) -> None:
        with rec.live.entered() as (seq, arm):
            impl, label = (impls[arm.copy], labels[arm.copy]) if arm.copy in impls else (original, labels["stock"])
            threads = cap.apply(arm.threads)
            t0 = time.perf_counter()
            impl(self, *args, **kwargs)
            rec.add_many({f"shm_copies_{label}": 1.0, f"shm_copy_s_{label}": time.perf_counter() - t0,
                          f"seq.{seq}.shm_copies_{label}": 1.0, f"copies_threads.{threads}": 1.0})

    dispatched_init.__perf_copy_dispatch__ = True  # type: ignore[attr-defined]
    cls.__init__ = dispatched_init
    rec.installed["copy_module"] = module
    if rec.live.launch.copy in unavailable:
        rec.errors.append(unavailable[rec.live.launch.copy])

    def copy_available(arm: Any) -> list[str]:
        return [unavailable[arm.copy]] if arm.copy in unavailable else []

    rec.live.add_applier(copy_available)


def install_ipc_probe(rec: Recorder) -> None:
    """Count IPC handle opens and time feature rebuilds in this process."""
    try:
        import torch
    except ImportError as exc:
        rec.errors.append(f"ipc: torch missing: {exc!r}")
        return
    storage = torch.UntypedStorage
    orig_open = storage._new_shared_cuda

    def counted_open(*args: Any, **kwargs: Any) -> Any:
        rec.add("ipc_opens")
        return orig_open(*args, **kwargs)

    storage._new_shared_cuda = staticmethod(counted_open)
    rec.installed["ipc_open_probe"] = "torch.UntypedStorage._new_shared_cuda"
    tried = []
    for name in IPC_MODULES:
        try:
            mod = importlib.import_module(name)
            proxy = getattr(mod, sglang_version.CUDA_IPC_PROXY_CLASS)
        except Exception as exc:
            tried.append(f"{name}: {exc!r}")
            continue
        for meth in REBUILD_METHODS:
            fn = proxy.__dict__.get(meth)
            if fn is None or getattr(fn, "__perf_timed__", False):
                continue
            proxy_meth = _timed(rec, fn)
            setattr(proxy, meth, proxy_meth)
        rec.installed["ipc_rebuild_probe"] = name
        break
    else:  # never time the wrong code: the proof carries the error and the arm check fails on it
        rec.errors.append("ipc: " + _unsupported(
            f"no {sglang_version.CUDA_IPC_PROXY_CLASS} in the modules this suite knows ({'; '.join(tried)})"))


def _timed(rec: Recorder, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def timed(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            rec.add("ipc_rebuild_s", time.perf_counter() - t0)
            rec.add("ipc_rebuilds")

    timed.__perf_timed__ = True  # type: ignore[attr-defined]
    return timed


def install_running_probe(rec: Recorder) -> None:
    """Count the decode and mixed batches this process's scheduler runs by their size (module docstring). Installed
    where SGLang has already imported its scheduler module, i.e. in a scheduler process, which loads the plugins from
    inside it; any other process runs no batch. A layout the suite does not know is an error in the proof (so every
    arm check fails on it), never a silent zero. Failures are recorded, never raised."""
    name = os.environ.get(SCHEDULER_MODULE_ENV) or sglang_version.SCHEDULER_MODULE
    module = sys.modules.get(name)
    if module is None:
        rec.installed[RUNNING_PROBE] = f"none: {name} was not imported when the plugin loaded (no scheduler here)"
        return
    where = f"{name}.{sglang_version.SCHEDULER_CLASS}.{sglang_version.RUN_BATCH_METHOD}"
    cls = getattr(module, sglang_version.SCHEDULER_CLASS, None)
    run_batch = getattr(cls, sglang_version.RUN_BATCH_METHOD, None) if isinstance(cls, type) else None
    if not callable(run_batch):
        rec.errors.append("running: " + _unsupported(f"there is no {where}, so running requests cannot be counted"))
        return
    if getattr(run_batch, "__perf_running_probe__", False):
        return  # already installed in this process
    try:
        problem = sglang_version.run_batch_problem(list(inspect.signature(run_batch).parameters))
    except (TypeError, ValueError) as exc:
        problem = f"has no readable signature ({exc!r})"
    if problem is not None:
        rec.errors.append("running: " + _unsupported(f"{where} {problem}, so running requests cannot be counted"))
        return
    failed: list[str] = []

    @functools.wraps(run_batch)
    def counted_run_batch(self: Any, batch: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            mode = batch.forward_mode
            if mode.is_decode() or mode.is_mixed():
                rec.tally(RUNNING_BATCH + str(len(batch.reqs)))
        except Exception as exc:  # never raise into SGLang: the proof says it, once
            if not failed:
                failed.append(repr(exc))
                rec.errors.append("running: " + _unsupported(f"a batch handed to {where} could not be counted "
                                                             f"(forward_mode.is_decode/is_mixed, reqs): {exc!r}"))
        return run_batch(self, batch, *args, **kwargs)

    counted_run_batch.__perf_running_probe__ = True  # type: ignore[attr-defined]
    setattr(cls, sglang_version.RUN_BATCH_METHOD, counted_run_batch)
    rec.installed[RUNNING_PROBE] = where

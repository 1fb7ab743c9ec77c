"""Install the variant arms inside an SGLang process and count what really runs.

- copy arm: ``ShmPointerMMData.__init__`` is switched by ``transport.sglang_compat.apply_copy_arm`` and then
  wrapped by a counter that labels every copy with the implementation of the function it actually calls
  (``classify_copy``), so a patch that did not take shows up as copies under the wrong label.
- IPC probe: ``torch.UntypedStorage._new_shared_cuda`` (one call = one IPC handle open) and the proxy's
  ``reconstruct_on_target_device`` / ``borrow_on_target_device`` (count and time per rebuild).
"""

from __future__ import annotations

import functools
import importlib
import time
import types
from collections.abc import Callable
from typing import Any

from engine_fixtures import sglang_version
from engine_fixtures.sglang_plugin.proof_file import Recorder
from engine_fixtures.transport.arms import COPY_ARMS

MM_UTILS = sglang_version.MM_UTILS_MODULE
IPC_MODULES = sglang_version.CUDA_IPC_MODULES
REBUILD_METHODS = ("reconstruct_on_target_device", "borrow_on_target_device")


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


def install_copy_arm(rec: Recorder, arm: str) -> None:
    """Switch and instrument SGLang's SHM producer copy. Failures are recorded, never raised."""
    try:
        mm_utils = importlib.import_module(MM_UTILS)
        cls = getattr(mm_utils, sglang_version.SHM_CLASS)
    except Exception as exc:  # an SGLang without the class: the proof shows it, and the arm check fails on it
        rec.errors.append("copy: " + _unsupported(f"cannot import {MM_UTILS}.{sglang_version.SHM_CLASS} ({exc!r})"))
        return
    if arm != "stock":  # stock: SGLang's own copy, only counted and labelled by what its code does
        try:
            from engine_fixtures.transport.sglang_compat import apply_copy_arm

            apply_copy_arm(cls, arm)
        except Exception as exc:
            rec.errors.append(f"copy: apply_copy_arm({arm!r}) failed: {exc!r}")
    inner = cls.__init__
    impl = classify_copy(inner)

    @functools.wraps(inner)
    def counted_init(self: Any, tensor: Any, *args: Any, **kwargs: Any) -> None:
        t0 = time.perf_counter()
        inner(self, tensor, *args, **kwargs)
        rec.add(f"shm_copy_s_{impl}", time.perf_counter() - t0)
        rec.add(f"shm_copies_{impl}")

    counted_init.__perf_copy_arm__ = impl  # type: ignore[attr-defined]
    cls.__init__ = counted_init
    rec.installed["copy"] = impl


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

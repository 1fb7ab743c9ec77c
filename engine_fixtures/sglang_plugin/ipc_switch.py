"""The CUDA IPC pool-handle cache, switched live in the tokenizer manager (the producer decides per proxy).

Every release routes each multimodal feature through ``BaseMultimodalProcessor._wrap_tensor_for_cuda_ipc``, which
reads the cache flag at call time where ``sglang_version.ipc_cache_layout`` says: the module global
``base_processor._IPC_POOL_HANDLE_CACHE`` (0.5.16) or the processor attribute ``self.use_ipc_pool_handle_cache``
(0.5.17+; 0.5.18+ hands it to ``MmItemMemoryPool.wrap_tensor(use_pool_handle_cache=...)``). ``install_ipc_switch``
wraps that method: inside the live-arm gate it sets the flag the layout reads to the live arm's value (``on`` /
``off``; ``stock`` = the release's own value: what it computed from the launch environment when the engine was
launched as shipped, else the env variable's default in this release), calls SGLang's method, and counts each proxy
made under the value it carried, ``ipc_proxies_cache_<on|off>`` and ``seq.<seq>.ipc_proxies_cache_<on|off>``. A
layout the suite does not know, or one other than the release's dated layout, leaves SGLang alone and makes every arm
that forces the cache an error in the proof (``errors`` for the launch arm, ``arm_errors`` for a live one), never a
silent no-op. Opens and rebuilds are counted in the schedulers
(``instrument.install_ipc_probe``).

``defer_ipc_switch`` installs it from the proof thread once SGLang itself has imported ``base_processor`` in a
tokenizer-manager process (the plugin loads before the server resolves its arguments, and the processors read
environment variables at import, so the plugin imports none of them); until then SGLang runs on the launch
environment, i.e. the launch arm, and a switch to another cache value is an ``arm_errors`` entry there.
"""

from __future__ import annotations

import functools
import importlib
import sys
import threading
import warnings
from typing import Any

from engine_fixtures import sglang_version as sv
from engine_fixtures.sglang_plugin.proof_file import Recorder, process_title, role_of

CACHE_VALUES = {"on": True, "off": False}
PRODUCER_ROLES = ("http_server", "tokenizer_worker")  # the processes whose processor wraps features for CUDA IPC


def _unsupported(what: str) -> str:
    version = sv.installed()
    return what if version is None else sv.unsupported(what, version)


def _refuse(rec: Recorder, why: str) -> None:
    """No switch here: ``stock`` (SGLang left alone) still runs; an arm that forces the cache is an error."""
    rec.installed["ipc_cache_switch"] = "none: " + why
    if rec.live.launch.ipc_cache != "stock":
        rec.errors.append(f"ipc_cache={rec.live.launch.ipc_cache}: not switched: {why}")
    rec.live.add_applier(lambda arm: [] if arm.ipc_cache == "stock" else [
        f"ipc_cache={arm.ipc_cache}: not switched here: {why}"])


def install_ipc_switch(rec: Recorder) -> None:
    """Install the live pool-handle cache switch in this process. Failures are recorded, never raised."""
    where = f"{sv.MM_PROCESSOR_MODULE}.{sv.MM_PROCESSOR_CLASS}.{sv.IPC_WRAP_METHOD}"
    try:
        with warnings.catch_warnings():  # SGLang's import chain warns
            warnings.simplefilter("ignore")
            module = importlib.import_module(sv.MM_PROCESSOR_MODULE)
            flag = getattr(importlib.import_module(sv.ENVIRON_MODULE).envs, sv.IPC_CACHE_ENV)
        cls = getattr(module, sv.MM_PROCESSOR_CLASS)
        wrap = cls.__dict__[sv.IPC_WRAP_METHOD]
    except Exception as exc:
        _refuse(rec, _unsupported(f"cannot find {where} or {sv.ENVIRON_MODULE}.envs.{sv.IPC_CACHE_ENV} ({exc!r})"))
        return
    if getattr(wrap, "__perf_ipc_switch__", False):
        return  # already installed in this process
    layout = sv.ipc_cache_layout(wrap.__code__.co_names, vars(module))
    dated = sv.expected_ipc_cache_layout(sv.parse(sv.installed()))
    if layout is None:
        _refuse(rec, _unsupported(f"{where} reads neither the module global {sv.IPC_CACHE_GLOBAL} nor "
                                  f"self.{sv.IPC_CACHE_ATTR}, so the IPC pool-handle cache cannot be switched"))
        return
    if dated is not None and layout != dated:
        _refuse(rec, _unsupported(f"{where} reads the {layout} flag, but this release is dated to read the {dated} "
                                  "flag"))
        return
    try:  # the release's own value: its computed one for an engine launched as shipped, else its default
        stock = bool(flag.get() if rec.live.launch.ipc_cache == "stock" else flag.default)
    except Exception as exc:
        _refuse(rec, _unsupported(f"cannot read {sv.IPC_CACHE_ENV} ({exc!r})"))
        return
    rec.installed.update({"ipc_cache_layout": layout, "ipc_cache_stock": "on" if stock else "off",
                          "ipc_cache_switch": where})

    @functools.wraps(wrap)
    def switched_wrap(self: Any, *args: Any, **kwargs: Any) -> Any:
        with rec.live.entered() as (seq, arm):
            on = CACHE_VALUES.get(arm.ipc_cache, stock)
            if layout == sv.IPC_CACHE_LAYOUT_GLOBAL:
                setattr(module, sv.IPC_CACHE_GLOBAL, on)
            else:
                setattr(self, sv.IPC_CACHE_ATTR, on)
            out = wrap(self, *args, **kwargs)
            if type(out).__name__ == sv.CUDA_IPC_PROXY_CLASS:  # not the tensor itself, nor its .cpu() fallback
                value = "on" if on else "off"
                rec.add_many({f"ipc_proxies_cache_{value}": 1.0, f"seq.{seq}.ipc_proxies_cache_{value}": 1.0})
            return out

    switched_wrap.__perf_ipc_switch__ = True  # type: ignore[attr-defined]
    setattr(cls, sv.IPC_WRAP_METHOD, switched_wrap)


def defer_ipc_switch(rec: Recorder) -> None:
    """Install the switch from the proof thread once SGLang has imported its processors here (module docstring)."""
    done = threading.Event()
    rec.installed["ipc_cache_switch"] = f"pending: until SGLang imports {sv.MM_PROCESSOR_MODULE}"

    def producer() -> bool:
        return role_of(process_title()) in PRODUCER_ROLES

    def attempt() -> bool:
        if not producer():
            rec.installed["ipc_cache_switch"] = "none: not a tokenizer-manager process (no proxies are made here)"
            return True
        if sv.MM_PROCESSOR_MODULE not in sys.modules:
            return False
        install_ipc_switch(rec)  # importing waits for SGLang's own import to finish
        done.set()
        return True

    def not_yet(arm: Any) -> list[str]:
        if done.is_set() or arm.ipc_cache == rec.live.launch.ipc_cache or not producer():
            return []
        return [f"ipc_cache={arm.ipc_cache}: not switched yet: SGLang has not imported {sv.MM_PROCESSOR_MODULE} in "
                "this process (no processor yet), so it still runs the launch arm's value"]

    rec.live.add_applier(not_yet)
    rec.deferred.append(attempt)

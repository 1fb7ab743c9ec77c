"""SGLang plugin (entry point ``sglang.srt.plugins: perf_arms``) that applies and proves variant arms, live.

SGLang calls ``load()`` in the HTTP server and in every scheduler (spawned processes do not inherit
in-memory patches, so this is the only way in). It does nothing unless ``PERF_ARMS_PROOF_DIR`` is set.
Then it starts on the launch arm (``arm_state.launch_arm``: ``PERF_ARMS_COPY`` stock | torch | buffer,
``PERF_ARMS_IPC_CACHE`` stock | on | off, the named patches of ``PERF_ARMS_PATCH``; seq 0) and installs, in every
process but the detokenizer, the hooks that read the live arm at each call: the copy dispatcher where
``wrap_shm_features`` runs (``instrument.install_copy_dispatch``: the copy arm and the thread cap), on the cuda_ipc
transport the IPC open/rebuild probe (``instrument``) and, in the tokenizer manager once SGLang has imported its
processors, the IPC pool-handle cache switch (``ipc_switch.defer_ipc_switch``), and the named patches (known
slowdowns for proving the gates, ``patches.py``; ``slow-decode``, a GPU delay on the model runner, once SGLang has
imported the model runner in a scheduler); in the schedulers (which load the plugins from inside SGLang's
scheduler module, before they set their title) the running-batch probe (``instrument.install_running_probe``: each
decode batch counted by its size, the scheduler's own count of running requests). The proof thread switches the
live arm when ``<PERF_ARMS_PROOF_DIR>/arms.json`` (``EngineHandle.set_arm``) names a new seq, and writes a
per-process proof JSON into the directory with the arm it applied (``engine.proof`` reads it back).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

PROOF_DIR_ENV = "PERF_ARMS_PROOF_DIR"
_RECORDER: Any = None


def load(*_args: Any, **_kwargs: Any) -> None:
    """Entry point. Idempotent per process; never raises into SGLang (errors go into the proof)."""
    global _RECORDER
    directory = os.environ.get(PROOF_DIR_ENV, "")
    if not directory or _RECORDER is not None:
        return
    from engine_fixtures import sglang_version
    from engine_fixtures.sglang_plugin import patches
    from engine_fixtures.sglang_plugin.arm_state import LiveState, launch_arm
    from engine_fixtures.sglang_plugin.instrument import install_copy_dispatch, install_ipc_probe, install_running_probe
    from engine_fixtures.sglang_plugin.ipc_switch import defer_ipc_switch
    from engine_fixtures.sglang_plugin.proof_file import Recorder, process_title, role_of
    from engine_fixtures.transport.live import LiveArm

    requested = {k: os.environ.get("PERF_ARMS_" + k.upper(), "") for k in ("copy", "ipc_cache", "transport")}
    errors = []
    try:
        launch = launch_arm(os.environ)
    except ValueError as exc:  # the proof says so, and the arm check fails on it
        launch, errors = LiveArm(), [f"launch arm refused, running SGLang as shipped: {exc}"]
    rec = Recorder(Path(directory), requested, live=LiveState(launch))
    rec.errors += errors
    with contextlib.suppress(Exception):  # never raise into SGLang; the proof then says None
        rec.sglang_version = sglang_version.installed()
    rec.installed["ipc_pool_handle_cache_env"] = os.environ.get("SGLANG_USE_IPC_POOL_HANDLE_CACHE", "<unset>")
    _RECORDER = rec
    role = role_of(process_title())
    try:
        if role != "detokenizer":
            install_copy_dispatch(rec)
        install_running_probe(rec)  # where SGLang imported its scheduler module: a scheduler process
        if role != "detokenizer" and requested["transport"] == "cuda_ipc":
            install_ipc_probe(rec)
            defer_ipc_switch(rec)
        named = os.environ.get(patches.PATCH_ENV, "")
        if named:
            rec.installed["patches_requested"] = named
            patches.install(rec, role, patches.parse(named))
        rec.live.add_applier(patches.apply_arm)
    except Exception as exc:  # never break the engine; the proof carries the failure
        rec.errors.append(f"install failed: {exc!r}")
    rec.live.refresh(Path(directory))  # an arm switched before this process started
    rec.start()


def active_recorder() -> Any:
    """This process's Recorder (None when the plugin is inactive); for tests and debugging."""
    return _RECORDER

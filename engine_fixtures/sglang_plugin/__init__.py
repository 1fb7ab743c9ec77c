"""SGLang plugin (entry point ``sglang.srt.plugins: perf_arms``) that applies and proves variant arms.

SGLang calls ``load()`` in the HTTP server and in every scheduler (spawned processes do not inherit
in-memory patches, so this is the only way in). It does nothing unless ``PERF_ARMS_PROOF_DIR`` is set.
Then it installs the copy arm (``PERF_ARMS_COPY``: torch | buffer) where ``wrap_shm_features`` runs, counts
IPC handle opens and rebuild time in schedulers, applies the named patches of ``PERF_ARMS_PATCH`` (known
slowdowns for proving the gates, ``patches.py``), and writes a per-process proof JSON into the directory
(``engine.proof`` reads it back).
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
    from engine_fixtures.sglang_plugin.instrument import install_copy_arm, install_ipc_probe
    from engine_fixtures.sglang_plugin.proof_file import Recorder, process_title, role_of

    requested = {k: os.environ.get("PERF_ARMS_" + k.upper(), "") for k in ("copy", "ipc_cache", "transport")}
    rec = Recorder(Path(directory), requested)
    with contextlib.suppress(Exception):  # never raise into SGLang; the proof then says None
        rec.sglang_version = sglang_version.installed()
    rec.installed["ipc_pool_handle_cache_env"] = os.environ.get("SGLANG_USE_IPC_POOL_HANDLE_CACHE", "<unset>")
    _RECORDER = rec
    role = role_of(process_title())
    try:
        if role != "detokenizer" and requested["copy"]:
            install_copy_arm(rec, requested["copy"])
        if role != "detokenizer" and requested["transport"] == "cuda_ipc":
            install_ipc_probe(rec)
        named = os.environ.get(patches.PATCH_ENV, "")
        if named:
            rec.installed["patches_requested"] = named
            patches.install(rec, role, patches.parse(named))
    except Exception as exc:  # never break the engine; the proof carries the failure
        rec.errors.append(f"install failed: {exc!r}")
    rec.start()


def active_recorder() -> Any:
    """This process's Recorder (None when the plugin is inactive); for tests and debugging."""
    return _RECORDER

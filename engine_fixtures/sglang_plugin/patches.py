"""Named patches: slowdowns of a known size that a reference or candidate build can carry, to prove the gates.

A build names them in ``PERF_ARMS_PATCH`` (``--perf-reference patch:slow-scheduler=0.3``):
``NAME=MS[,NAME=MS...]``. Each busy-waits ``MS`` milliseconds of CPU (a spin, not a sleep: a real CPU
regression burns the process's time and quota) at one place in SGLang:

- ``slow-scheduler``: every ``Scheduler.run_batch`` call, i.e. every prefill or decode step of every
  scheduler process: TPOT grows by about ``MS`` while the step is CPU-bound.
- ``slow-tokenizer``: every ``TokenizerManager._send_one_request`` call in the HTTP server process, on its
  event loop: TTFT grows, and under a CPU quota so does the tokenizer manager's CPU per request.

The magnitude can be changed while the engine runs: it is part of the live arm (``transport.live.LiveArm.patches``,
switched through ``<PERF_ARMS_PROOF_DIR>/arms.json`` by ``EngineHandle.set_arm``; ``apply_arm`` is the applier each
process registers). An installed patch the live arm does not name runs at 0 ms. Each call spins and is counted
inside the live-arm gate (``arm_state.LiveState.entered``), so the milliseconds a call spun and counted are those of
one arm; the proof has ``patch_calls.<name>`` and ``patch_ms.<name>``, so a patch that did not take shows.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
from collections.abc import Callable, Mapping
from typing import Any

from engine_fixtures.inject import spin

PATCH_ENV = "PERF_ARMS_PATCH"
TARGETS: Mapping[str, tuple[str, str, str]] = {
    # name: (module, class, method)
    "slow-scheduler": ("sglang.srt.managers.scheduler", "Scheduler", "run_batch"),
    "slow-tokenizer": ("sglang.srt.managers.tokenizer_manager", "TokenizerManager", "_send_one_request"),
}
ROLES = {"slow-scheduler": "scheduler", "slow-tokenizer": "http_server"}
_MAGNITUDE_MS: dict[str, float] = {}


def parse(text: str) -> dict[str, float]:
    """``"slow-scheduler=0.3,slow-tokenizer=2"`` -> ``{name: ms}``; ValueError names the known patches."""
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, ms = part.partition("=")
        if name not in TARGETS:
            raise ValueError(f"unknown patch {name!r}: known patches are {', '.join(sorted(TARGETS))}")
        try:
            value = float(ms) if ms else 0.0
        except ValueError:
            raise ValueError(f"patch {name!r}: milliseconds must be a number, got {ms!r}") from None
        if value < 0:
            raise ValueError(f"patch {name!r}: milliseconds must be >= 0, got {value}")
        out[name] = value
    return out


def _slow(name: str, rec: Any) -> None:
    """One call's spin, counted, inside the live-arm gate (the original call runs outside it)."""
    live = getattr(rec, "live", None)
    with live.entered() if live is not None else contextlib.nullcontext():
        ms = _MAGNITUDE_MS.get(name, 0.0)
        spin(ms)
        rec.add_many({f"patch_calls.{name}": 1.0, f"patch_ms.{name}": ms})


def _wrap(fn: Callable[..., Any], name: str, rec: Any) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def slowed_async(*args: Any, **kwargs: Any) -> Any:
            _slow(name, rec)
            return await fn(*args, **kwargs)

        return slowed_async

    @functools.wraps(fn)
    def slowed(*args: Any, **kwargs: Any) -> Any:
        _slow(name, rec)
        return fn(*args, **kwargs)

    return slowed


def install(rec: Any, role: str, requested: Mapping[str, float]) -> None:
    """Install each requested patch in this process if its target module is already imported here (SGLang calls
    the plugin from inside the scheduler module in a scheduler, and after importing the tokenizer manager in the
    HTTP server; the process title is not always set yet, so the role cannot decide). Nothing is imported for a
    patch; a patch meant for this role whose module is missing is an error in the proof."""
    for name, ms in requested.items():
        module, cls_name, method = TARGETS[name]
        loaded = sys.modules.get(module)
        if loaded is None:
            if ROLES[name] == role:
                rec.errors.append(f"patch {name}: {module} is not imported in this {role} process")
            continue
        try:
            cls = getattr(loaded, cls_name)
            original = cls.__dict__[method]
        except Exception as exc:
            rec.errors.append(f"patch {name}: cannot find {module}.{cls_name}.{method}: {exc!r}")
            continue
        _MAGNITUDE_MS[name] = ms
        setattr(cls, method, _wrap(original, name, rec))
        rec.installed[f"patch:{name}"] = f"{module}.{cls_name}.{method} +{ms:g} ms"


def apply_arm(arm: Any) -> list[str]:
    """The live arm's milliseconds for every patch installed here (0 for one it does not name); an applier of
    ``arm_state.LiveState``. A patch named but not installed here is not this process's to run: the fixture checks
    that some process carries it."""
    wanted = dict(arm.patches)
    for name in _MAGNITUDE_MS:
        _MAGNITUDE_MS[name] = float(wanted.get(name, 0.0))
    return [f"unknown patch {name!r}: known patches are {', '.join(sorted(TARGETS))}" for name in wanted
            if name not in TARGETS]


def magnitudes() -> dict[str, float]:
    return dict(_MAGNITUDE_MS)

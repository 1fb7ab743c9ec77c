"""Named patches: slowdowns of a known size that a reference or candidate build can carry, to prove the gates.

A build names them in ``PERF_ARMS_PATCH`` (``--perf-reference patch:slow-decode=0.4``): ``NAME=MS[,NAME=MS...]``.
Each adds ``MS`` milliseconds at one place in SGLang, of one kind of delay (``Target.delay``):

- ``slow-decode`` (GPU): every decode step of every scheduler's model runner, ``ModelRunner.forward`` when
  ``forward_batch.forward_mode.is_decode()`` (not a speculative draft model's runner): MS ms of GPU time
  (``gpu_delay``: ``torch.cuda._sleep``) enqueued on the current stream, the one the forward runs on, before the
  forward's own kernels or its CUDA-graph replay. It sits on the critical path of the step whatever the overlapped
  scheduler hides of the CPU, so TPOT grows by about MS while decoding is GPU-bound (the realised size is measured on
  a live arm before an A/B relies on it: the GPU clock can differ from the one the cycles were computed with).
  Prefill, mixed and idle batches are left alone.
- ``slow-scheduler`` (CPU): every ``Scheduler.run_batch`` call, i.e. every prefill or decode step of every scheduler
  process, busy-waits MS ms of CPU (a spin, not a sleep: a real CPU regression burns the process's time and quota).
  The overlapped scheduler hides much of it (on an H200, -0.6 % and +8.7 % TPOT for a nominal 15 %).
- ``slow-tokenizer`` (CPU): every ``TokenizerManager._send_one_request`` call in the HTTP server process, on its
  event loop: TTFT grows, and under a CPU quota so does the tokenizer manager's CPU per request.

The magnitude can be changed while the engine runs: it is part of the live arm (``transport.live.LiveArm.patches``,
switched through ``<PERF_ARMS_PROOF_DIR>/arms.json`` by ``EngineHandle.set_arm``; ``apply_arm`` is the applier each
process registers). An installed patch the live arm does not name runs at 0 ms. Each call is delayed and counted
inside the live-arm gate (``arm_state.LiveState.entered``), so the milliseconds a call added and counted are those of
one arm; the proof has ``patch_calls.<name>`` and ``patch_ms.<name>``, so a patch that did not take shows, and
``installed["patch:<name>"]`` says where it was installed (a GPU patch adds ``patch:<name>.gpu_delay``: the clock and
the cycles per ms). A GPU patch counts with ``Recorder.tally_many`` (no proof write on the decode path).

A patch is installed where its module is already imported (``install``). A target that SGLang imports only later in
the process (``Target.imported_by``: the model runner, imported when the scheduler builds its TP worker) is installed
by the proof thread once SGLang has finished that import (``Recorder.deferred``; the plugin imports nothing for a
patch), long before the first decode step (the model is loaded and the CUDA graphs captured in between).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from engine_fixtures import sglang_version as sv
from engine_fixtures.inject import spin
from engine_fixtures.sglang_plugin.gpu_delay import cuda_sleep, cuda_unavailable

PATCH_ENV = "PERF_ARMS_PATCH"
CPU_SPIN = "cpu-spin"  # engine_fixtures.inject.spin in the calling thread
GPU_SLEEP = "gpu-sleep"  # gpu_delay.CudaSleep on the current CUDA stream, decode steps only


@dataclass(frozen=True)
class Target:
    """Where a named patch wraps SGLang, in which process, with which kind of delay."""

    module: str
    cls: str
    method: str
    role: str  # the process (proof_file.role_of) whose missing module is an error
    delay: str = CPU_SPIN
    # A module imported in the role's process when the plugin loads, which imports ``module`` later itself: there the
    # patch waits for that import instead of calling the module missing.
    imported_by: str = ""
    params: tuple[str, ...] = ()  # the wrapped method's leading parameters the wrapper relies on (none: any)

    @property
    def where(self) -> str:
        return f"{self.module}.{self.cls}.{self.method}"


TARGETS: Mapping[str, Target] = {
    "slow-decode": Target(sv.MODEL_RUNNER_MODULE, sv.MODEL_RUNNER_CLASS, sv.MODEL_FORWARD_METHOD, "scheduler",
                          GPU_SLEEP, imported_by=sv.SCHEDULER_MODULE, params=sv.MODEL_FORWARD_PARAMS),
    "slow-scheduler": Target("sglang.srt.managers.scheduler", "Scheduler", "run_batch", "scheduler"),
    "slow-tokenizer": Target("sglang.srt.managers.tokenizer_manager", "TokenizerManager", "_send_one_request",
                             "http_server"),
}
ROLES = {name: target.role for name, target in TARGETS.items()}
_MAGNITUDE_MS: dict[str, float] = {}
# The GPU delay's two seams (the self-tests hand in fakes): why none can be enqueued here, and its factory, called
# once per installed GPU patch at its first decode step.
GPU_UNAVAILABLE: Callable[[], str | None] = cuda_unavailable
GPU_DELAY: Callable[[], Any] = cuda_sleep


def parse(text: str) -> dict[str, float]:
    """``"slow-decode=0.4,slow-tokenizer=2"`` -> ``{name: ms}``; ValueError names the known patches."""
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


def _gate(rec: Any) -> Any:
    live = getattr(rec, "live", None)
    return live.entered() if live is not None else contextlib.nullcontext()


def _slow(name: str, rec: Any) -> None:
    """One call's spin, counted, inside the live-arm gate (the original call runs outside it)."""
    with _gate(rec):
        ms = _MAGNITUDE_MS.get(name, 0.0)
        spin(ms)
        rec.add_many({f"patch_calls.{name}": 1.0, f"patch_ms.{name}": ms})


class DecodeDelay:
    """The GPU delay of one installed GPU patch: built at the first decode step that has milliseconds to add (CUDA
    and the device are set up by then), then enqueued before every decode step's forward, counted."""

    def __init__(self, name: str, rec: Any, where: str) -> None:
        self.name, self.rec, self.where = name, rec, where
        self.delay: Any = None
        self.off = False  # a failure that stops the patch in this process (in the proof's errors)
        self.capture_reported = False

    def before(self, runner: Any, forward_batch: Any) -> None:
        """Enqueue and count the live arm's milliseconds if ``forward_batch`` is a decode step. Never raises."""
        if self.off:
            return
        try:
            decode = not getattr(runner, "is_draft_worker", False) and bool(forward_batch.forward_mode.is_decode())
        except Exception as exc:
            self._stop(f"cannot tell a decode batch (forward_batch.forward_mode.is_decode()): {exc!r}")
            return
        if not decode:
            return
        with _gate(self.rec):
            ms = _MAGNITUDE_MS.get(self.name, 0.0)
            if ms > 0 and not self._enqueue(ms):
                return
            self.rec.tally_many({f"patch_calls.{self.name}": 1.0, f"patch_ms.{self.name}": ms})

    def _enqueue(self, ms: float) -> bool:
        try:
            if self.delay is None:
                self.delay = GPU_DELAY()
                self.rec.installed[f"patch:{self.name}.gpu_delay"] = self.delay.describe()
            if self.delay(ms):
                return True
        except Exception as exc:
            self._stop(f"the GPU delay failed ({exc!r})")
            return False
        if not self.capture_reported:  # not enqueued, not counted: it would be baked into the graph
            self.capture_reported = True
            self.rec.errors.append(f"patch {self.name}: {self.where} ran a decode step while its stream was capturing "
                                   "a CUDA graph; no delay was enqueued there (it would be part of the graph)")
        return False

    def _stop(self, why: str) -> None:
        self.off = True
        self.rec.errors.append(f"patch {self.name}: {why}; it adds nothing in this process from here on")


def _wrap(fn: Callable[..., Any], name: str, rec: Any, target: Target) -> Callable[..., Any]:
    if target.delay == GPU_SLEEP:
        decode_delay = DecodeDelay(name, rec, target.where)

        @functools.wraps(fn)
        def delayed(self: Any, forward_batch: Any, *args: Any, **kwargs: Any) -> Any:
            decode_delay.before(self, forward_batch)
            return fn(self, forward_batch, *args, **kwargs)

        delayed.__perf_decode_delay__ = decode_delay  # type: ignore[attr-defined]
        return delayed

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


def _patch(rec: Any, name: str, target: Target) -> bool:
    """Wrap ``target`` if its module is imported here and done importing; False: not yet (the proof thread retries).
    Never imports: a module that another thread is still importing is left to finish."""
    loaded = sys.modules.get(target.module)
    if loaded is None or getattr(getattr(loaded, "__spec__", None), "_initializing", False):
        return False
    try:
        cls = getattr(loaded, target.cls)
        original = cls.__dict__[target.method]
        problem = sv.leading_params_problem(list(inspect.signature(original).parameters), target.params)
    except Exception as exc:
        problem = f"cannot find {target.where}: {exc!r}"
    else:
        problem = None if problem is None else f"{target.where} {problem}"
    if problem is not None:
        _MAGNITUDE_MS.pop(name, None)
        rec.errors.append(f"patch {name}: {problem}")
        return True
    setattr(cls, target.method, _wrap(original, name, rec, target))
    kind = "GPU sleep on the forward's stream, decode steps" if target.delay == GPU_SLEEP else "CPU spin, every call"
    rec.installed[f"patch:{name}"] = f"{target.where} +{_MAGNITUDE_MS.get(name, 0.0):g} ms ({kind})"
    return True


def install(rec: Any, role: str, requested: Mapping[str, float]) -> None:
    """Install each requested patch in this process if its target module is imported here (SGLang calls the plugin
    from inside the scheduler module in a scheduler, and after importing the tokenizer manager in the HTTP server; the
    process title is not always set yet, so the role cannot decide), or will be (``Target.imported_by`` is: the proof
    thread installs it once SGLang has imported it). Nothing is imported for a patch; a patch meant for this role whose
    module is missing is an error in the proof, and so is a GPU patch where torch.cuda is not available."""
    for name, ms in requested.items():
        target = TARGETS[name]
        later = bool(target.imported_by) and target.imported_by in sys.modules
        if target.module not in sys.modules and not later:
            if target.role == role:
                rec.errors.append(f"patch {name}: {target.module} is not imported in this {role} process")
            continue
        if target.delay == GPU_SLEEP:
            why = GPU_UNAVAILABLE()
            if why is not None:
                rec.errors.append(f"patch {name}: {why}, so no GPU delay can be enqueued in this process: not "
                                  "installed")
                continue
        _MAGNITUDE_MS[name] = ms  # the live arm's, from here on: apply_arm keeps it while the install waits
        if not _patch(rec, name, target):
            rec.installed[f"patch:{name}"] = f"pending: until SGLang imports {target.module} here"
            rec.deferred.append(functools.partial(_patch, rec, name, target))


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

"""Session-wide engine reuse: one live engine per ``EngineSpec.key``, leak-checked after every stop.

Engines are expensive (minutes on a GPU), so tests asking for the same spec share one. By default at
most one engine is live (``max_live=1``): asking for another spec stops the previous one first, so two
engines never compete for the GPU or the CPU quota. After every stop the factory asserts that no
process, /dev/shm segment or cgroup outlived it (``leaks.LeakSnapshot``). An engine whose server process ignored
SIGTERM for ``stop_grace_s`` is SIGKILLed, checked like any other, and then reported as ``ProcessStopError``:
its shutdown is broken, and a test must not pass over that.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from engine_fixtures.engine.handle import SHM_MIN_FREE_MB, STOP_GRACE_S, EngineHandle, start_engine
from engine_fixtures.engine.spec import EngineSpec
from engine_fixtures.errors import ProcessCrashed, ProcessStopError
from engine_fixtures.isolation.cgroups import PREFIX
from engine_fixtures.isolation.leaks import Leaks, LeakSnapshot

# /dev/shm names SGLang 0.5.16 and its libraries leave behind after a clean SIGTERM stop (seen on the H200 with
# cuda_ipc: the IPC pool's sync flags, torch's shared-CUDA ref counters, CUDA's IPC shm, the loads snapshot,
# loky/multiprocessing semaphores). They are the engine's leak, not the suite's: the factory removes them and
# reports them as a finding; anything else new is still a LeakError.
ENGINE_SHM_PREFIXES = ("sgl_shm_", "sglang_", "torch_", "cuda.shm.", "sem.loky-", "sem.mp-")


def engine_leftovers(leaks: Leaks) -> tuple[str, ...]:
    return tuple(name for name in leaks.shm if name.startswith(ENGINE_SHM_PREFIXES))


def cgroup_prefix(spec: EngineSpec) -> str:
    """Prefix of the cgroups this spec's engines get (``CpuQuota(name=spec.name)``), so the leak check
    never blames another test's quota running at the same time."""
    return f"{PREFIX}{spec.name.removeprefix('perf').strip('-')}-"


@dataclass
class _Live:
    handle: EngineHandle
    before: LeakSnapshot


class EngineFactory:
    """``get(spec)`` starts or reuses; ``release(spec)`` stops one; ``close()`` stops all (session end)."""

    def __init__(self, workroot: Path, deadline_s: float, *, python: str = sys.executable, max_live: int = 1,
                 on_finding: Callable[[str], None] | None = None, stop_grace_s: float = STOP_GRACE_S,
                 shm_min_free_mb: float = SHM_MIN_FREE_MB):
        self.stop_grace_s = stop_grace_s
        self.shm_min_free_mb = shm_min_free_mb
        self.on_finding = on_finding or (lambda _msg: None)
        self.workroot = Path(workroot)
        self.deadline_s = deadline_s
        self.python = python
        self.max_live = max_live
        self.started = 0
        self._live: dict[str, _Live] = {}

    def live(self) -> tuple[EngineHandle, ...]:
        return tuple(v.handle for v in self._live.values())

    def get(self, spec: EngineSpec, *, port: int | None = None) -> EngineHandle:
        """A ready engine for ``spec``: the live one if it is still running, else a fresh one."""
        entry = self._live.get(spec.key)
        if entry is not None:
            try:
                entry.handle.ensure_alive()
                return entry.handle
            except ProcessCrashed:
                self.release(spec)  # a dead engine is never reused; its crash is reported by the test using it
                raise
        while len(self._live) >= self.max_live:
            self.release(next(iter(self._live.values())).handle.spec)
        before = LeakSnapshot.take(cgroup_prefix(spec))
        self.started += 1
        workdir = self.workroot / f"{self.started:02d}-{spec.key}"
        try:
            handle = start_engine(spec, workdir, deadline_s=self.deadline_s, python=self.python, port=port,
                                  shm_min_free_mb=self.shm_min_free_mb)
        except BaseException:
            self._check_leaks(spec, before)
            raise
        self._live[spec.key] = _Live(handle, before)
        return handle

    def release(self, spec: EngineSpec) -> None:
        """Stop the engine for ``spec`` (if live) and check that it left nothing behind."""
        entry = self._live.pop(spec.key, None)
        if entry is None:
            return
        try:
            report = entry.handle.stop(self.stop_grace_s)
        finally:
            self._check_leaks(spec, entry.before)
        if entry.handle.pid in report.killed:
            raise ProcessStopError(
                f"engine {spec.key} (pid {entry.handle.pid}) ignored SIGTERM for {self.stop_grace_s:g} s and was "
                f"SIGKILLed with {len(report.killed) - 1} other process(es); nothing outlived it (processes, cgroup, "
                f"/dev/shm checked), but its shutdown is broken: see {entry.handle.log_path}. If it is only slow "
                f"to exit, raise EngineFactory(stop_grace_s=...)")

    def _others(self) -> frozenset[int]:
        """Processes of the engines still live (an A/B pair): not leaks of the one just stopped."""
        pids: set[int] = set()
        for live in self._live.values():
            pids.add(live.handle.pid)
            with contextlib.suppress(psutil.Error):
                pids.update(c.pid for c in psutil.Process(live.handle.pid).children(recursive=True))
        return frozenset(pids)

    def _check_leaks(self, spec: EngineSpec, before: LeakSnapshot) -> None:
        """Remove and report what the engine itself left in /dev/shm; LeakError for anything else."""
        others = self._others()
        leftovers = engine_leftovers(before.new_since(LeakSnapshot.take(cgroup_prefix(spec)), others))
        if leftovers:
            Leaks(shm=leftovers).reap()
            shown = ", ".join(leftovers[:6]) + (f" and {len(leftovers) - 6} more" if len(leftovers) > 6 else "")
            self.on_finding(f"engine {spec.key} ({spec.arm}) left {len(leftovers)} /dev/shm segment(s) after its "
                            f"stop; the fixture removed them: {shown}")
        before.assert_no_new(LeakSnapshot.take(cgroup_prefix(spec)), others)

    def close(self) -> None:
        """Stop every live engine; the first error is raised after all were stopped."""
        errors: list[BaseException] = []
        for live in list(self._live.values()):
            try:
                self.release(live.handle.spec)
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise errors[0]

"""Session-wide engine reuse: one live engine per ``EngineSpec.launch_key``, leak-checked after every stop.

Engines are expensive (half a minute to minutes on a GPU), so tests asking for the same launch share one: the
CPU quota is not part of the launch (with ``sandbox=True`` every engine gets a cgroup sandbox, unlimited
when its spec has no quota, and a later spec's quota is written to the live sandbox); concurrency, image size and
request counts are the load's, never the engine's. By default at most one engine is live (``max_live=1``):
asking for another launch stops the previous one first, so two engines never compete for the GPU or the CPU
quota. ``get_many(specs)`` starts the engines it needs one after the other (a group: ``engine.group``). After
every stop the factory asserts that no process, /dev/shm segment or cgroup outlived it (``leaks.LeakSnapshot``);
an owner-less engine segment is the engine's only when its processes were seen holding it or nobody else alive
could have made it (``_check_leaks``), so another suite on the same box is never blamed nor cleaned up. An
engine whose server process ignored SIGTERM for ``stop_grace_s`` is SIGKILLed, checked like any other, and then
reported as ``ProcessStopError``: its shutdown is broken, and a test must not pass over that.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from engine_fixtures.engine.handle import SHM_MIN_FREE_MB, STOP_GRACE_S, EngineHandle, start_engine
from engine_fixtures.engine.spec import EngineSpec
from engine_fixtures.errors import ConfigError, ProcessCrashed, ProcessStopError
from engine_fixtures.isolation import run_registry
from engine_fixtures.isolation.cgroups import PREFIX
from engine_fixtures.isolation.leaks import OWNERLESS_PREFIXES, Leaks, LeakSnapshot, shm_held_by_tree

# /dev/shm names SGLang 0.5.16 and its libraries leave behind after a clean SIGTERM stop (seen on the H200 with
# cuda_ipc: the IPC pool's sync flags, torch's shared-CUDA ref counters, CUDA's IPC shm, the loads snapshot,
# loky/multiprocessing semaphores). They are the engine's leak, not the suite's: the factory removes them and
# reports them as a finding; anything else new is still a LeakError.
ENGINE_SHM_PREFIXES = OWNERLESS_PREFIXES


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
    held: frozenset[str] = frozenset()  # /dev/shm names its processes were seen holding (at ready)


class EngineFactory:
    """``get(spec)`` starts or reuses; ``release(spec)`` stops one; ``close()`` stops all (session end)."""

    def __init__(self, workroot: Path, deadline_s: float, *, python: str = sys.executable, max_live: int = 1,
                 on_finding: Callable[[str], None] | None = None, stop_grace_s: float = STOP_GRACE_S,
                 shm_min_free_mb: float = SHM_MIN_FREE_MB, sandbox: bool = False, state_dir: Path | None = None):
        self.sandbox = sandbox
        self.state_dir = state_dir if state_dir is not None else run_registry.default_state_dir()
        self.stop_grace_s = stop_grace_s
        self.shm_min_free_mb = shm_min_free_mb
        self.on_finding = on_finding or (lambda _msg: None)
        self.workroot = Path(workroot)
        self.deadline_s = deadline_s
        self.python = python
        self.max_live = max_live
        self.started = 0
        self.quota_changes = 0
        self._lock = threading.Lock()
        self._live: dict[str, _Live] = {}

    def live(self) -> tuple[EngineHandle, ...]:
        return tuple(v.handle for v in self._live.values())

    def get(self, spec: EngineSpec, *, port: int | None = None) -> EngineHandle:
        """A ready engine for ``spec``: the live one of its launch (its quota set to ``spec``'s), else a fresh one."""
        live = self._reuse(spec)
        if live is not None:
            return live
        while len(self._live) >= self.max_live:
            self.release(next(iter(self._live.values())).handle.spec)
        return self._start(spec, port)

    def get_many(self, specs: Sequence[EngineSpec],
                 before_start: Callable[[EngineSpec], EngineSpec] | None = None) -> tuple[EngineHandle, ...]:
        """Ready engines for ``specs`` (distinct launches), the missing ones started **one at a time**: each starts
        only once the previous one is ready, past its GPU memory profile (two SGLang servers profiling at once on
        one GPU count each other's allocations: ``engine.group``). ``before_start(spec)`` gives the spec actually
        launched (the group's memory rule reads the GPU's free memory at that moment). Every live engine outside
        the group is stopped first; ``max_live`` does not bound a group. If any start fails, the ones started here
        are stopped and its error is raised."""
        keys = [s.launch_key for s in specs]
        if len(set(keys)) != len(keys):
            raise ConfigError("get_many() needs distinct launches (give each spec its own name)")
        for entry in [v for k, v in self._live.items() if k not in keys]:
            self.release(entry.handle.spec)  # a group is live alone: no outsider competes for the GPU or the quota
        handles: dict[int, EngineHandle] = {}
        for i, spec in enumerate(specs):
            if (live := self._reuse(spec)) is not None:
                handles[i] = live
        missing = [i for i in range(len(specs)) if i not in handles]
        started: list[EngineHandle] = []
        try:
            for i in missing:
                spec = before_start(specs[i]) if before_start is not None else specs[i]
                handles[i] = self._start(spec, None)
                started.append(handles[i])
        except BaseException:
            for h in started:
                with contextlib.suppress(Exception):
                    self.release(h.spec)
            raise
        return tuple(handles[i] for i in range(len(specs)))

    def _reuse(self, spec: EngineSpec) -> EngineHandle | None:
        entry = self._live.get(spec.launch_key)
        if entry is None:
            return None
        try:
            entry.handle.ensure_alive()
        except ProcessCrashed:
            self.release(spec)  # a dead engine is never reused; its crash is reported by the test using it
            raise
        if entry.handle.spec.cpu_quota != spec.cpu_quota:
            if entry.handle.quota is None:  # started without a sandbox: only a fresh start can carry a quota
                self.release(spec)
                return None
            entry.handle.set_quota(spec.cpu_quota)
            self.quota_changes += 1
        return entry.handle

    def _start(self, spec: EngineSpec, port: int | None) -> EngineHandle:
        before = LeakSnapshot.take(cgroup_prefix(spec))
        with self._lock:
            self.started += 1
            workdir = self.workroot / f"{self.started:02d}-{spec.launch_key}"
        seen: set[str] = set()  # what a start that fails was holding when it was stopped
        try:
            handle = start_engine(spec, workdir, deadline_s=self.deadline_s, python=self.python, port=port,
                                  shm_min_free_mb=self.shm_min_free_mb, sandbox=self.sandbox, shm_seen=seen)
        except BaseException:
            self._check_leaks(spec, before, frozenset(seen))
            raise
        with self._lock:
            self._live[spec.launch_key] = _Live(handle, before, shm_held_by_tree(handle.pid))
        return handle

    def release(self, spec: EngineSpec) -> None:
        """Stop the engine for ``spec`` (if live) and check that it left nothing behind."""
        entry = self._live.pop(spec.launch_key, None)
        if entry is None:
            return
        held = entry.held | shm_held_by_tree(entry.handle.pid)  # before the stop: what it holds now is its own
        try:
            report = entry.handle.stop(self.stop_grace_s)
        finally:
            self._check_leaks(spec, entry.before, held)
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

    def _check_leaks(self, spec: EngineSpec, before: LeakSnapshot, held: frozenset[str] = frozenset()) -> None:
        """Remove and report what the engine itself left in /dev/shm; LeakError for anything else.

        An engine segment's name carries no owner, so one that appeared while the engine ran is its leftover if its
        processes were seen holding it (``held``: at ready and just before the stop), or if nobody else alive could
        have made it (``others_who_may_own``). Otherwise it may be a live neighbour's (another run on this box, a
        segment between its creator and its reader): it is left alone and said so, never unlinked nor blamed here."""
        # One look at /dev/shm for the whole check: a neighbour's segment held at one look and orphaned at the next
        # (its engine crashed; its own check removes it) must not become this engine's leak in between.
        leaks = before.new_since(LeakSnapshot.take(cgroup_prefix(spec)), self._others(), seen=held,
                                 state=self.state_dir)
        leftovers = engine_leftovers(leaks)
        if leaks.left_alone:
            self.on_finding(f"engine {spec.key} ({spec.arm}): left alone {len(leaks.left_alone)} /dev/shm segment(s) "
                            f"that appeared while it ran but that none of its processes was seen holding, as "
                            f"{leaks.left_alone_for} is alive and may own them: {', '.join(leaks.left_alone)}")
        if leftovers:
            Leaks(shm=leftovers).reap()
            shown = ", ".join(leftovers[:6]) + (f" and {len(leftovers) - 6} more" if len(leftovers) > 6 else "")
            self.on_finding(f"engine {spec.key} ({spec.arm}) left {len(leftovers)} /dev/shm segment(s) after its "
                            f"stop; the fixture removed them: {shown}")
        dataclasses.replace(leaks, shm=tuple(n for n in leaks.shm if n not in leftovers)).raise_if_any()

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

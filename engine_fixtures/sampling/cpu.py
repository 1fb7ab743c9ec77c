"""CPU use per process role with psutil: cores, top-style percent, share of quota / CPUs, threads.

``cores`` is exact: the sum of each process's ``cpu_times`` (user + system) delta over the window,
divided by the window's wall time. ``percent`` is the mean of per-tick ``cpu_percent`` readings
(100 = one core, as in top); each process's first reading is a priming call and is discarded.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType

import psutil

from engine_fixtures.errors import ConfigError, MeasurementError
from engine_fixtures.sampling.base import Ticker, require_closed

RolesFn = Callable[[], Mapping[str, Sequence[int]]]
TOTAL = "total"


@dataclass
class _Tracked:
    """One process seen in the window: its baseline CPU seconds and the last value read."""

    proc: psutil.Process
    base_s: float
    last_s: float
    gone: bool = False


@dataclass
class _RoleAcc:
    """Per role: the pids ever seen, per-tick summed percent, max summed threads."""

    pids: set[int] = field(default_factory=set)
    percent: list[float] = field(default_factory=list)
    threads_max: int = 0


def _cpu_s(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


class CpuSampler:
    """Samples the processes of each role from ``roles_fn()`` every ``interval_s``.

    ``roles_fn`` is called on every tick, so children that appear later are picked up. A process
    that exists before the window counts from the window's start; one created inside it counts
    from its creation. A process that disappears keeps the CPU time last read for it (at most
    one interval of its last CPU use is lost). Summary, per role and for ``total`` (the union of
    all roles' pids): ``cpu.<role>.cores``, ``cpu.<role>.percent``, ``cpu.<role>.share_of_cpus``
    (cores / visible CPUs), ``cpu.<role>.share_of_quota`` (cores / ``quota_cores``; only when a quota
    is given), ``threads.<role>.max``. Roles that never had a live process get no metrics and are
    listed in ``empty_roles``.
    """

    def __init__(
        self,
        roles_fn: RolesFn,
        interval_s: float = 0.1,
        quota_cores: float | None = None,
        name: str = "cpu",
    ) -> None:
        if quota_cores is not None and not quota_cores > 0:
            raise ConfigError(f"CpuSampler: quota_cores must be > 0 or None (no quota), got {quota_cores!r}")
        self.name = name
        self.quota_cores = quota_cores
        self.visible_cpus = len(os.sched_getaffinity(0))
        self.empty_roles: tuple[str, ...] = ()
        self._roles_fn = roles_fn
        self._ticker = Ticker(name, self._tick, interval_s)
        self._tracked: dict[int, _Tracked] = {}
        self._roles: dict[str, _RoleAcc] = {}
        self._declared: set[str] = set()
        self._t0 = 0.0
        self._t0_epoch = 0.0
        self._wall_s = 0.0
        self._closed = False

    @property
    def self_cpu_s(self) -> float:
        """CPU seconds the sampling thread itself used (its overhead)."""
        return self._ticker.self_cpu_s

    def wait_ticks(self, n: int, timeout_s: float) -> bool:
        """Block until ``n`` samples were taken inside the window (False on timeout or sampler failure)."""
        return self._ticker.wait_ticks(n, timeout_s)

    @property
    def wall_s(self) -> float:
        """The closed window's wall-clock duration in seconds."""
        return self._wall_s

    @property
    def ticks(self) -> int:
        return self._ticker.ticks

    def available(self) -> str | None:
        return None

    def __enter__(self) -> CpuSampler:
        self._t0_epoch = time.time()
        self._t0 = time.monotonic()
        self._observe(priming=True)
        self._ticker.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            self._ticker.stop()
            self._observe(priming=False)
        finally:
            self._wall_s = time.monotonic() - self._t0
            self._closed = True

    def _tick(self) -> None:
        self._observe(priming=False)

    def _track(self, pid: int) -> _Tracked | None:
        """Start tracking ``pid``; prime cpu_percent. None if it is already gone."""
        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                created_inside = proc.create_time() >= self._t0_epoch
                now_s = _cpu_s(proc)
                proc.cpu_percent(interval=None)  # priming: its 0.0 is meaningless
        except psutil.NoSuchProcess:
            return None
        tracked = _Tracked(proc, 0.0 if created_inside else now_s, now_s)
        self._tracked[pid] = tracked
        return tracked

    def _observe(self, priming: bool) -> None:
        roles = {role: tuple(pids) for role, pids in self._roles_fn().items()}
        if TOTAL in roles:
            raise ConfigError(
                f"CpuSampler: role name {TOTAL!r} is reserved for the union of all roles; rename it"
            )
        self._declared.update(roles)
        readings: dict[int, tuple[float, int] | None] = {}
        for pids in roles.values():
            for pid in pids:
                if pid in readings:
                    continue
                readings[pid] = self._read(pid, priming)
        all_pids = {pid for pids in roles.values() for pid in pids}
        for role, pids in (*roles.items(), (TOTAL, tuple(sorted(all_pids)))):
            live = [readings[p] for p in pids if readings.get(p) is not None]
            acc = self._roles.setdefault(role, _RoleAcc())
            acc.pids.update(p for p in pids if p in self._tracked)
            if not live:
                continue
            acc.threads_max = max(acc.threads_max, sum(r[1] for r in live if r is not None))
            fresh = [r[0] for r in live if r is not None and r[0] >= 0.0]
            if not priming and fresh:
                acc.percent.append(sum(fresh))

    def _read(self, pid: int, priming: bool) -> tuple[float, int] | None:
        """(percent since last read, or -1.0 right after priming; threads), or None if not alive."""
        tracked = self._tracked.get(pid)
        if tracked is None:
            tracked = self._track(pid)
            if tracked is None:
                return None
            try:
                return (-1.0, tracked.proc.num_threads())
            except psutil.NoSuchProcess:
                tracked.gone = True
                return None
        if tracked.gone:
            return None
        try:
            with tracked.proc.oneshot():
                if not tracked.proc.is_running():  # pid reused by another process
                    raise psutil.NoSuchProcess(pid)
                tracked.last_s = _cpu_s(tracked.proc)
                percent = tracked.proc.cpu_percent(interval=None)
                threads = tracked.proc.num_threads()
        except psutil.NoSuchProcess:
            tracked.gone = True
            return None
        return (-1.0 if priming else percent, threads)

    def summary(self) -> dict[str, float]:
        require_closed(self.name, self._closed)
        if not self._wall_s > 0:
            raise MeasurementError(f"sampler {self.name!r}: the window had no duration")
        out: dict[str, float] = {}
        empty = []
        for role, acc in self._roles.items():
            if not acc.pids:
                empty.append(role)
                continue
            used_s = sum(self._tracked[p].last_s - self._tracked[p].base_s for p in acc.pids)
            cores = used_s / self._wall_s
            out[f"cpu.{role}.cores"] = cores
            if acc.percent:
                out[f"cpu.{role}.percent"] = sum(acc.percent) / len(acc.percent)
            out[f"cpu.{role}.share_of_cpus"] = cores / self.visible_cpus
            if self.quota_cores is not None:
                out[f"cpu.{role}.share_of_quota"] = cores / self.quota_cores
            out[f"threads.{role}.max"] = float(acc.threads_max)
        self.empty_roles = tuple(sorted(r for r in empty if r != TOTAL))
        return out

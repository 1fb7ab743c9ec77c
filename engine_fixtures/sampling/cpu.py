"""CPU use per process role with psutil: cores, top-style percent, share of quota / CPUs, threads.

``cores`` is exact: the sum of each process's ``cpu_times`` (user + system) delta over the window,
divided by the window's wall time. ``percent`` is the same quantity in top's unit (100 = one core):
``100 * cores``, one definition (the mean of per-tick percents disagreed with it by 30 % on a loaded box,
128.9 vs 98.1, and failed CI on its own).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType

import psutil

from engine_fixtures.errors import ConfigError, MeasurementError
from engine_fixtures.quota import checked_cores
from engine_fixtures.sampling.base import TickedWindow, Ticker, require_closed
from engine_fixtures.sampling.series import Counter

RolesFn = Callable[[], Mapping[str, Sequence[int]]]
TOTAL = "total"


@dataclass
class _Tracked:
    """One process seen in the window: its baseline CPU seconds and the last value read."""

    proc: psutil.Process
    created: float  # psutil create_time, to detect pid reuse
    base_s: float  # CPU seconds at the window's start (0 if born inside it)
    last_s: float  # CPU seconds at the last reading
    read_at: float  # monotonic time of the last reading
    threads: int  # thread count at the last slow pass
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


class CpuSampler(TickedWindow):
    """Samples the processes of each role from ``roles_fn()`` every ``interval_s``.

    ``roles_fn`` is re-read every ``roles_interval_s`` (and at the window's end), so children that
    appear later are picked up; between re-reads the known pids are sampled every tick. (A tree walk
    costs about 2 ms with psutil on a 2-core box, too much to repeat at 10 Hz.) A process
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
        roles_interval_s: float = 1.0,
    ) -> None:
        checked_cores(quota_cores, "CpuSampler: quota_cores")
        self.name = name
        self.quota_cores = quota_cores
        self.visible_cpus = len(os.sched_getaffinity(0))
        self.empty_roles: tuple[str, ...] = ()
        self._roles_fn = roles_fn
        self._roles_interval_s = roles_interval_s
        self._roles_read_at = float("-inf")
        self._current: dict[str, tuple[int, ...]] = {}
        self._all_pids: tuple[int, ...] = ()
        self._ticker = Ticker(name, self._tick, interval_s)
        self._tracked: dict[int, _Tracked] = {}
        self._acc: dict[str, _RoleAcc] = {}
        self._t0 = 0.0
        self._t0_created_frame = 0.0
        self._wall_s = 0.0
        self._closed = False
        self._failure: str | None = None
        self.used = Counter()  # CPU seconds used per role since the window opened, at every reading

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
        # psutil's create_time is boot_time() + start ticks since boot (CLOCK_BOOTTIME): compare in that frame
        self._t0_created_frame = psutil.boot_time() + time.clock_gettime(time.CLOCK_BOOTTIME)
        self._t0 = time.monotonic()
        self._observe(priming=True, reread_roles=True)
        self._ticker.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._close_window(lambda: self._observe(priming=False, reread_roles=True), self._end_wall_clock)

    def _end_wall_clock(self) -> None:
        self._wall_s = time.monotonic() - self._t0

    def _tick(self) -> None:
        self._observe(priming=False)

    def _track(self, pid: int, now: float) -> _Tracked | None:
        """Start tracking ``pid`` (its first reading only primes the percent). None if it is gone."""
        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                created = proc.create_time()
                now_s = _cpu_s(proc)
                threads = proc.num_threads()
        except psutil.NoSuchProcess:
            return None
        inside = created >= self._t0_created_frame  # born in the window: all its CPU time counts
        tracked = _Tracked(proc, created, 0.0 if inside else now_s, now_s, now, threads)
        self._tracked[pid] = tracked
        return tracked

    def _current_roles(self, reread: bool, now: float) -> tuple[dict[str, tuple[int, ...]], bool]:
        """The roles, re-read from ``roles_fn`` when due; True in the second item when re-read now."""
        if reread or now - self._roles_read_at >= self._roles_interval_s:
            roles = {role: tuple(pids) for role, pids in self._roles_fn().items()}
            if TOTAL in roles:
                raise ConfigError(
                    f"CpuSampler: role name {TOTAL!r} is reserved for the union of all roles; rename it"
                )
            self._current, self._roles_read_at = roles, now
            return roles, True
        return self._current, False

    def _observe(self, priming: bool, reread_roles: bool = False) -> None:
        """One sample. Fast pass: cpu_times only. Slow pass (when roles are re-read, and at the window's
        start and end): also the pid's identity (create_time, against pid reuse) and its thread count."""
        now = time.monotonic()
        roles, slow = self._current_roles(reread_roles, now)
        percent: dict[int, float | None] = {}  # live pid -> % since its previous reading; None if just primed
        for pids in roles.values():
            for pid in pids:
                if pid not in percent:
                    alive, pct = self._read(pid, now, slow)
                    if alive:
                        percent[pid] = pct
        if priming:
            percent = dict.fromkeys(percent)
        if slow:
            self._all_pids = tuple(sorted({pid for pids in roles.values() for pid in pids}))
        all_pids = self._all_pids
        for role, pids in (*roles.items(), (TOTAL, all_pids)):
            acc = self._acc.get(role) or self._acc.setdefault(role, _RoleAcc())
            if slow:  # pids only change when the roles are re-read
                acc.pids.update(p for p in pids if p in self._tracked)
            live = [p for p in pids if p in percent]
            if not live:
                continue
            acc.threads_max = max(acc.threads_max, sum(self._tracked[p].threads for p in live))
            fresh = [v for p in live if (v := percent[p]) is not None]
            if fresh:
                acc.percent.append(sum(fresh))
        self.used.add(now, {role: sum(self._tracked[p].last_s - self._tracked[p].base_s for p in acc.pids)
                            for role, acc in self._acc.items()})

    def _read(self, pid: int, now: float, slow: bool) -> tuple[bool, float | None]:
        """Update ``pid``'s reading: (alive, top-style % since its previous reading, None on the first
        reading, which only primes)."""
        tracked = self._tracked.get(pid)
        if tracked is None:
            return self._track(pid, now) is not None, None
        if tracked.gone:
            return False, None
        try:
            if slow:
                with tracked.proc.oneshot():
                    if tracked.proc.create_time() != tracked.created:  # pid reused by another process
                        raise psutil.NoSuchProcess(pid)
                    now_s = _cpu_s(tracked.proc)
                    tracked.threads = tracked.proc.num_threads()
            else:
                now_s = _cpu_s(tracked.proc)
                if now_s < tracked.last_s:  # CPU time went backwards: the pid now names another process
                    raise psutil.NoSuchProcess(pid)
        except psutil.NoSuchProcess:
            tracked.gone = True
            return False, None
        dt = now - tracked.read_at
        pct = 100.0 * (now_s - tracked.last_s) / dt if dt > 0 else None
        tracked.last_s, tracked.read_at = now_s, now
        return True, pct

    def cut(self, t0: float, t1: float) -> dict[str, float]:
        """``cpu.<role>.cores`` (and the shares) over ``[t0, t1]`` inside a closed window (``time.monotonic()``)."""
        require_closed(self.name, self._closed, self._failure)
        out: dict[str, float] = {}
        for role in self.used.keys():  # noqa: SIM118 (a Counter's keys, not a dict)
            if not self._acc[role].pids:
                continue
            cores = self.used.delta(role, t0, t1) / (t1 - t0)
            out[f"cpu.{role}.cores"] = cores
            out[f"cpu.{role}.share_of_cpus"] = cores / self.visible_cpus
            if self.quota_cores is not None:
                out[f"cpu.{role}.share_of_quota"] = cores / self.quota_cores
        return out

    def summary(self) -> dict[str, float]:
        require_closed(self.name, self._closed, self._failure)
        if not self._wall_s > 0:
            raise MeasurementError(f"sampler {self.name!r}: the window had no duration")
        out: dict[str, float] = {}
        empty = []
        for role, acc in self._acc.items():
            if not acc.pids:
                empty.append(role)
                continue
            used_s = sum(self._tracked[p].last_s - self._tracked[p].base_s for p in acc.pids)
            cores = used_s / self._wall_s
            out[f"cpu.{role}.cores"] = cores
            out[f"cpu.{role}.percent"] = 100.0 * cores
            out[f"cpu.{role}.share_of_cpus"] = cores / self.visible_cpus
            if self.quota_cores is not None:
                out[f"cpu.{role}.share_of_quota"] = cores / self.quota_cores
            out[f"threads.{role}.max"] = float(acc.threads_max)
        self.empty_roles = tuple(sorted(r for r in empty if r != TOTAL))
        return out

"""The host's own CPU state per window: the hypervisor's steal time and the speed of a fixed CPU probe.

Runs minutes apart on one H200 differed by 9 % in req/s and 13 % in TTFT while every engine-side reading (SM clock,
KV pool, achieved concurrency, the client's loop lag) stayed put (docs/results/h200-issue36-2026-12-04b). In the cpu
transport TTFT holds the image preprocessing on the host's vCPUs, so the host's CPU is the suspect: a vCPU the
hypervisor takes away (steal) or runs at another clock makes every arm slower alike. This sampler names it.

- ``host.steal_fraction``: the share of the CPUs' time in the window that the hypervisor ran something else
  (``psutil.cpu_times`` steal over all the time counted, over ``cpus`` or every CPU), from /proc/stat.
- ``host.probe_cpu_ms``: the median CPU time one fixed unit of pure-Python work took on this thread
  (``time.thread_time``), run every ``probe_interval_s``: a slower vCPU clock or a busier physical core (another
  tenant on its sibling thread) makes it longer, preemption on this box does not (the thread's own CPU time).
- ``host.probe_wall_ms``: the same probes' wall time (``time.perf_counter``): it adds what preemption and steal took.

The probe runs in the sampler's thread in the test process (the load client is a process of its own, so the probe
never delays a request's timestamps); it costs about ``PROBE_LOOPS`` loop steps, a millisecond, every half second.
Where /proc/stat has no steal column (not Linux) ``available()`` says so and no number is made up.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from types import TracebackType

import numpy as np
import psutil

from engine_fixtures.sampling.base import TickedWindow, Ticker, require_closed
from engine_fixtures.sampling.series import Counter, Gauge

PROBE_LOOPS = 20_000  # about 1 ms of CPython on the H200's vCPUs and on the 2-core CI box
PROBE_INTERVAL_S = 0.5


def probe(loops: int = PROBE_LOOPS) -> tuple[float, float]:
    """One fixed unit of work: (thread CPU ms, wall ms) it took."""
    c0, w0 = time.thread_time(), time.perf_counter()
    x = 1
    for _ in range(loops):
        x = (x * 1103515245 + 12345) & 0xFFFFFFFF
    return (time.thread_time() - c0) * 1000, (time.perf_counter() - w0) * 1000


class HostSampler(TickedWindow):
    """Steal time over ``cpus`` (None: every CPU) and the fixed probe, every ``probe_interval_s``; ``cut(t0, t1)``
    gives one window's values (module docstring)."""

    def __init__(self, cpus: Sequence[int] | None = None, probe_interval_s: float = PROBE_INTERVAL_S,
                 name: str = "host") -> None:
        self.name = name
        self.cpus = tuple(cpus) if cpus else None
        self.times = Counter()  # cumulative steal and total CPU seconds
        self.probe_cpu = Gauge()
        self.probe_wall = Gauge()
        self._ticker = Ticker(name, self._sample, probe_interval_s)
        self._closed = False
        self._failure: str | None = None

    def available(self) -> str | None:
        if not hasattr(psutil.cpu_times(), "steal"):
            return "this kernel's /proc/stat has no steal column (not Linux); host steal time not collected"
        return None

    def _read_times(self) -> None:
        per_cpu = psutil.cpu_times(percpu=True)
        chosen = [per_cpu[i] for i in self.cpus if i < len(per_cpu)] if self.cpus else per_cpu
        steal = sum(t.steal for t in chosen)
        total = sum(sum(t) for t in chosen) - sum(t.guest + t.guest_nice for t in chosen)  # guest is in user
        self.times.add(time.monotonic(), {"steal": steal, "total": total})

    def _sample(self) -> None:
        self._read_times()
        cpu_ms, wall_ms = probe()
        now = time.monotonic()
        self.probe_cpu.add(now, cpu_ms)
        self.probe_wall.add(now, wall_ms)

    def __enter__(self) -> HostSampler:
        self._read_times()
        self._ticker.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._close_window(self._read_times, lambda: None)

    def cut(self, t0: float, t1: float) -> dict[str, float]:
        """The window ``[t0, t1)``: steal over the CPUs' counted time, the probes' median CPU and wall ms."""
        require_closed(self.name, self._closed, self._failure)
        total = self.times.delta("total", t0, t1)
        out = {"host.steal_fraction": self.times.delta("steal", t0, t1) / total if total > 0 else 0.0}
        for key, gauge in (("host.probe_cpu_ms", self.probe_cpu), ("host.probe_wall_ms", self.probe_wall)):
            out[key] = float(np.median(gauge.between(t0, t1, "CPU probe")))
        return out

    def summary(self) -> dict[str, float]:
        require_closed(self.name, self._closed, self._failure)
        if len(self.times.times) < 2:
            return {}
        return self.cut(self.times.times[0], self.times.times[-1])

    @property
    def self_cpu_s(self) -> float:
        return self._ticker.self_cpu_s

"""cgroup ``cpu.stat`` deltas over one window: usage, share of quota, periods and throttling.

The kernel's counters are cumulative and monotonic, so the window's values are the difference of
two reads (at ``__enter__`` and ``__exit__``); no thread is needed for a summary. Given ``interval_s``, the
counters are also read on a ``Ticker`` so that ``cut(t0, t1)`` gives the values of any span inside the window
(the GPU tier's segment cuts its windows from one load segment, as it does with the CPU and GPU samplers).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import TracebackType

from engine_fixtures.errors import MeasurementError, PerfError
from engine_fixtures.isolation.cgroups import CpuQuota, CpuStat
from engine_fixtures.quota import checked_cores
from engine_fixtures.sampling.base import Ticker, require_closed
from engine_fixtures.sampling.series import Counter


class CgroupSampler:
    """Reads ``stat_fn()`` (a cgroup's cumulative ``CpuStat``) at the window's start and end.

    Summary: ``cgroup.usage_cores`` (CPU seconds / wall seconds), ``cgroup.share_of_quota`` (only with a
    quota), ``cgroup.nr_periods``, ``cgroup.throttled_periods``, ``cgroup.throttled_ratio`` (throttled /
    periods; only when at least one period elapsed), ``cgroup.throttled_s``. A counter that goes
    backwards (the cgroup was recreated) is a ``MeasurementError``, never a negative number.
    """

    def __init__(
        self, stat_fn: Callable[[], CpuStat], quota_cores: float | None, name: str = "cgroup",
        interval_s: float | None = None,
    ) -> None:
        checked_cores(quota_cores, "CgroupSampler: quota_cores")
        self.name = name
        self.quota_cores = quota_cores
        self._stat_fn = stat_fn
        self._start: CpuStat | None = None
        self._t0 = 0.0
        self._delta: CpuStat | None = None
        self._wall_s = 0.0
        self._ticker = None if interval_s is None else Ticker(name, self._read, interval_s)
        self.read = Counter()  # the cumulative counters at every reading (with interval_s)

    @classmethod
    def for_quota(cls, quota: CpuQuota, name: str = "cgroup", interval_s: float | None = None) -> CgroupSampler:
        """The sampler of an entered ``CpuQuota`` sandbox, with its quota."""
        return cls(quota.stat, quota.cores, name=name, interval_s=interval_s)

    def _read(self) -> CpuStat:
        stat = self._stat_fn()
        self.read.add(time.monotonic(), {"usage_s": stat.usage_s, "nr_periods": float(stat.nr_periods),
                                         "nr_throttled": float(stat.nr_throttled), "throttled_s": stat.throttled_s})
        return stat

    def available(self) -> str | None:
        try:
            self._stat_fn()
        except (OSError, PerfError) as exc:
            return f"cgroup cpu.stat cannot be read: {exc}; cgroup metrics are not collected"
        return None

    def __enter__(self) -> CgroupSampler:
        self._delta = None
        self._start = self._read() if self._ticker is not None else self._stat_fn()
        self._t0 = time.monotonic()
        if self._ticker is not None:
            self._ticker.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._ticker is not None:
            self._ticker.stop()
        end = self._read() if self._ticker is not None else self._stat_fn()
        self._wall_s = time.monotonic() - self._t0
        if self._start is None:
            raise MeasurementError(f"sampler {self.name!r}: __exit__ without __enter__")
        self._delta = end - self._start

    def summary(self) -> dict[str, float]:
        require_closed(self.name, self._delta is not None)
        d = self._delta
        assert d is not None
        negative = [f for f in ("usage_s", "nr_periods", "nr_throttled", "throttled_s") if getattr(d, f) < 0]
        if negative:
            raise MeasurementError(
                f"sampler {self.name!r}: cgroup counters {negative} went backwards within the window (the "
                "cgroup was recreated or replaced); keep one cgroup for the whole measured window"
            )
        out = {
            "cgroup.usage_cores": d.usage_s / self._wall_s,
            "cgroup.nr_periods": float(d.nr_periods),
            "cgroup.throttled_periods": float(d.nr_throttled),
            "cgroup.throttled_s": d.throttled_s,
        }
        if self.quota_cores is not None:
            out["cgroup.share_of_quota"] = out["cgroup.usage_cores"] / self.quota_cores
        if d.nr_periods > 0:
            out["cgroup.throttled_ratio"] = d.nr_throttled / d.nr_periods
        return out

    def cut(self, t0: float, t1: float) -> dict[str, float]:
        """``cgroup.throttled_ratio`` (throttled / elapsed periods, where one elapsed), ``cgroup.throttled_s``
        and ``cgroup.usage_cores`` over ``[t0, t1]`` (``time.monotonic()``) inside a window read with
        ``interval_s``; the counters are interpolated between readings."""
        require_closed(self.name, self._delta is not None)
        if self._ticker is None:
            raise MeasurementError(f"sampler {self.name!r} was read at its window's ends only; give it interval_s "
                                   "to cut spans inside the window")
        out = {"cgroup.usage_cores": self.read.delta("usage_s", t0, t1) / (t1 - t0),
               "cgroup.throttled_s": self.read.delta("throttled_s", t0, t1)}
        if (periods := self.read.delta("nr_periods", t0, t1)) > 0:
            out["cgroup.throttled_ratio"] = self.read.delta("nr_throttled", t0, t1) / periods
        return out

"""The host sampler reads this box's real steal time and runs the real probe (no fake: /proc/stat is here)."""

from __future__ import annotations

import time

import pytest

from engine_fixtures.errors import MeasurementError
from engine_fixtures.sampling.host import HostSampler, probe


def test_the_probe_does_a_fixed_unit_of_work_and_times_it_in_cpu_and_wall() -> None:
    cpu_ms, wall_ms = probe(2000)
    assert 0 < cpu_ms <= wall_ms * 1.05 + 0.05  # the thread's CPU time cannot much exceed its wall time
    assert probe(20_000)[0] > cpu_ms  # ten times the work takes longer


def test_a_window_of_the_host_sampler_gives_steal_and_probe_values() -> None:
    sampler = HostSampler(probe_interval_s=0.05)
    assert sampler.available() is None  # Linux: /proc/stat has the steal column
    with sampler:
        t0 = time.monotonic()
        assert sampler._ticker.wait_ticks(8, timeout_s=10)
        t1 = time.monotonic()
    cut = sampler.cut(t0, t1)
    assert set(cut) == {"host.steal_fraction", "host.probe_cpu_ms", "host.probe_wall_ms"}
    assert 0.0 <= cut["host.steal_fraction"] <= 1.0
    assert min(cut["host.probe_cpu_ms"], cut["host.probe_wall_ms"]) > 0
    assert sampler.summary()["host.probe_cpu_ms"] > 0


def test_summary_before_the_window_closed_is_refused() -> None:
    with pytest.raises(MeasurementError, match="before its window closed"):
        HostSampler().cut(0.0, 1.0)

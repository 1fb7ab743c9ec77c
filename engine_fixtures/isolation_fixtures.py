"""Fixtures of the isolation core: cgroup support probe, CPU quota factory, leak check.

Contracts:
- ``cgroup_support`` (session): None if CPU quotas work here, else the reason (fact and fix).
- ``cpu_quota_factory`` (function): ``make(cores, *, name=..., root=...) -> CpuQuota`` returns an
  *entered* sandbox; every one is closed (processes killed, cgroup removed) at teardown, also when
  the test failed. Skips with the probe reason where quotas are impossible.
- ``leak_check`` (function): fails the test if it leaked a /dev/shm segment, a descendant process
  or a ``perf-*`` cgroup.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from engine_fixtures.isolation.cgroups import CpuQuota, probe_quota_support
from engine_fixtures.isolation.leaks import LeakSnapshot, no_leaks

QuotaFactory = Callable[..., CpuQuota]


@pytest.fixture(scope="session")
def cgroup_support() -> str | None:
    """Why CPU quotas cannot be applied here, or None (probed once per session)."""
    return probe_quota_support()


@pytest.fixture
def cpu_quota_factory(cgroup_support: str | None) -> Iterator[QuotaFactory]:
    """Make entered ``CpuQuota`` sandboxes that are all torn down after the test."""
    if cgroup_support is not None:
        pytest.skip(cgroup_support)
    with contextlib.ExitStack() as stack:

        def make(cores: float | None, *, name: str = "perf", root: Path | None = None) -> CpuQuota:
            return stack.enter_context(CpuQuota(cores, name=name, root=root))

        yield make


@pytest.fixture
def leak_check() -> Iterator[LeakSnapshot]:
    """Fail the test (at teardown) if it leaked a /dev/shm segment, a descendant or a ``perf-*`` cgroup;
    what leaked is cleaned up. Request it before other fixtures so their teardown runs first."""
    with no_leaks() as before:
        yield before

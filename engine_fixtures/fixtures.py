"""The suite's fixtures, as a pytest plugin module. Each fixture lives next to its concern and is
re-exported here so pytest finds it through the ``pytest11`` entry point."""

from __future__ import annotations

import pytest

from engine_fixtures.baselines.fixtures import perf_invariant, perf_record
from engine_fixtures.engine.fixtures import engine, engine_factory, perf_model_dir
from engine_fixtures.isolation_fixtures import cgroup_support, cpu_quota_factory, leak_check
from engine_fixtures.options import SETTINGS_KEY, Settings

__all__ = ["cgroup_support", "cpu_quota_factory", "engine", "engine_factory", "leak_check", "perf_invariant",
           "perf_model_dir", "perf_record", "perf_settings"]


@pytest.fixture(scope="session")
def perf_settings(pytestconfig: pytest.Config) -> Settings:
    """The session's resolved ``--perf-*`` options (frozen)."""
    return pytestconfig.stash[SETTINGS_KEY]

"""The suite's fixtures, as a pytest plugin module. Each fixture lives next to its concern and is
re-exported here so pytest finds it through the ``pytest11`` entry point."""

from __future__ import annotations

import pytest

from engine_fixtures.options import SETTINGS_KEY, Settings


@pytest.fixture(scope="session")
def perf_settings(pytestconfig: pytest.Config) -> Settings:
    """The session's resolved ``--perf-*`` options (frozen)."""
    return pytestconfig.stash[SETTINGS_KEY]


# Fixtures of each concern (added by the module that owns them):
from engine_fixtures.isolation_fixtures import cgroup_support, cpu_quota_factory, leak_check  # noqa: F401
from engine_fixtures.baselines.fixtures import perf_invariant, perf_record  # noqa: F401
from engine_fixtures.engine.fixtures import engine, engine_factory, perf_model_dir  # noqa: F401

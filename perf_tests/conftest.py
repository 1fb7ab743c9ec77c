"""Shared test hygiene for the suite's self-tests."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def _isolate_inner_pytest_runs(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs of pytest inside a test (pytester) must not inherit this session's PERF_* settings, e.g. the
    PERF_STRICT that a tox env sets: each self-test states the options it means."""
    if "pytester" in request.fixturenames:
        for name in [k for k in os.environ if k.startswith("PERF_")]:
            monkeypatch.delenv(name)

"""Shared test hygiene for the suite's self-tests."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _isolate_inner_pytest_runs(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs of pytest inside a test (pytester) must not inherit this session's PERF_* settings, e.g. the
    PERF_STRICT that a tox env sets: each self-test states the options it means."""
    if "pytester" in request.fixturenames:
        for name in [k for k in os.environ if k.startswith("PERF_")]:
            monkeypatch.delenv(name)


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Callable[[str, str], Path]]:
    """``mount(name, size)``: a tmpfs of ``size`` (e.g. "8m") at ``tmp_path/name``, for faults like a nearly full
    /dev/shm or a full disk; unmounted at teardown. Needs root: the test skips with that reason otherwise."""
    if os.geteuid() != 0:
        pytest.skip("mounts a small tmpfs: needs root")
    mounted: list[Path] = []

    def mount(name: str, size: str) -> Path:
        where = tmp_path / name
        where.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], check=True, timeout=30)
        mounted.append(where)
        return where

    yield mount
    for where in reversed(mounted):
        subprocess.run(["umount", str(where)], check=True, timeout=30)

"""Fixtures of the load generator's self-tests: one zero-work stub server per module."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator

import numpy as np
import psutil
import pytest

from perf_tests.support.stub_process import StubServer, stub_server


@pytest.fixture(scope="module")
def stub() -> Iterator[StubServer]:
    """A stub with no delays; per-test timing and failures go in the URL's query string."""
    with stub_server() as server:
        yield server


def stub_stats(url: str) -> tuple[np.ndarray, np.ndarray, int]:
    """Sorted server-side (arrivals, completions) and connections opened since the last call (which clears them)."""
    with urllib.request.urlopen(f"{url}/stub/stats", timeout=10) as resp:
        stats = json.loads(resp.read())
    return np.sort(stats["arrivals"]), np.sort(stats["completions"]), int(stats["connections"])


def server_in_flight(arrivals: np.ndarray, completions: np.ndarray, start: float, end: float) -> np.ndarray:
    """Requests in flight at the server, sampled on a fine grid over [start, end]."""
    grid = np.linspace(start, end, 20001)
    return np.searchsorted(arrivals, grid, side="right") - np.searchsorted(completions, grid, side="right")


def loadgen_children() -> list[psutil.Process]:
    """Load processes still alive under this test process (must be none after run_load returns)."""
    return [
        p for p in psutil.Process().children(recursive=True) if "engine_fixtures.loadgen.child" in " ".join(p.cmdline())
    ]

"""The harness self-tests' ``spawn`` fixture (``children.py`` holds what the tests share with it)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from perf_tests.selftests.harness.children import DEADLINE_S, Spawn


@pytest.fixture
def spawn() -> Iterator[Spawn]:
    """Start Python children; every one is killed and reaped at teardown, also when the test fails."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(code: str, **kwargs: object) -> subprocess.Popen[bytes]:
        """Start ``code`` and return once it printed ``ready`` (its interpreter start-up is over)."""
        proc = subprocess.Popen(  # type: ignore[call-overload]
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, **kwargs
        )
        procs.append(proc)
        assert proc.stdout.readline() == b"ready\n", f"child exited with {proc.wait(timeout=DEADLINE_S)}"
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait(timeout=DEADLINE_S)
        proc.stdin.close()
        proc.stdout.close()

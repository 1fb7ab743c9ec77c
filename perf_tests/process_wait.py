"""Waiting on a condition that another process brings about, in the self-tests that drive whole pytest runs."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable

import pytest


def wait_for(condition: Callable[[], bool], proc: subprocess.Popen, deadline_s: float = 120.0,
             context: Callable[[], str] = str) -> None:
    """Wait until ``condition()`` holds, waking on ``proc`` (never a sleep); fail if it exits first or at the
    deadline, with ``context()`` (e.g. the run's log tail) in the message."""
    end = time.monotonic() + deadline_s
    while not condition():
        assert proc.poll() is None, f"process {proc.pid} exited with {proc.returncode} first\n{context()}"
        assert time.monotonic() < end, f"condition not met within {deadline_s} s\n{context()}"
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=0.05)

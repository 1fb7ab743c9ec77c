"""What the sampler self-tests share: Python children that say when their start-up is over (the ``spawn`` fixture in
this folder's conftest starts them and kills them at teardown), and the wait for a sampler's ticks."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

from engine_fixtures.sampling.cpu import CpuSampler
from engine_fixtures.sampling.gpu import GpuSampler

READY = "print('ready', flush=True)\n"
BUSY = READY + "while True: pass"
IDLE = READY + "import sys; sys.stdin.read()"
DEADLINE_S = 30.0

Spawn = Callable[..., subprocess.Popen[bytes]]


def hold(sampler: CpuSampler | GpuSampler, ticks: int) -> None:
    """Keep the window open until the sampler took ``ticks`` samples (a condition with a deadline)."""
    assert sampler.wait_ticks(ticks, timeout_s=DEADLINE_S), "sampler stopped or stalled before its ticks"

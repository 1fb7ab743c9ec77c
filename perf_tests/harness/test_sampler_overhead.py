"""Sampler overhead: the CPU sampler at 10 Hz over a 20-process tree must cost < 2% of one core.

A ratio measured in one run (sampler CPU seconds / window wall seconds), not a timed unit test. Two
independent readings: the sampler thread's own ``time.thread_time`` and the kernel's CPU accounting
of this whole test process over the window (the main thread only waits on a condition meanwhile).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import psutil
import pytest

from engine_fixtures.sampling.cpu import CpuSampler

CHILDREN = 20
INTERVAL_S = 0.1
# A 10 s window at 10 Hz: the whole-process figure also carries the one-time cost of opening and closing the
# window (priming, role discovery over the tree), which a 5 s window left at the 2% edge (2.2% once in CI
# while the sampler thread itself stayed below); real measurement windows are longer still.
TICKS = 100
MAX_SHARE_OF_ONE_CORE = 0.02
DEADLINE_S = 60.0


@pytest.fixture
def idle_tree() -> Iterator[list[subprocess.Popen[bytes]]]:
    """20 idle Python children, each past its start-up; killed and reaped at teardown."""
    code = "print('ready', flush=True); import sys; sys.stdin.read()"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(CHILDREN):
            procs.append(subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE))
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline() == b"ready\n"
        yield procs
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait(timeout=DEADLINE_S)
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    pipe.close()


def _cpu_s(times: Any) -> float:
    return times.user + times.system


def test_cpu_sampler_overhead_is_below_two_percent_of_a_core(
    benchmark: Any, idle_tree: list[subprocess.Popen[bytes]], request: pytest.FixtureRequest
) -> None:
    me = psutil.Process()

    def roles() -> dict[str, list[int]]:  # re-walks the tree every tick, as the engine fixture does
        return {"tree": [c.pid for c in me.children(recursive=True)]}

    def window() -> tuple[CpuSampler, float]:
        sampler = CpuSampler(roles, interval_s=INTERVAL_S)
        before = _cpu_s(me.cpu_times())
        with sampler:
            assert sampler.wait_ticks(TICKS, timeout_s=DEADLINE_S), "the sampler fell behind or failed"
        return sampler, _cpu_s(me.cpu_times()) - before

    sampler, process_cpu_s = benchmark.pedantic(window, rounds=1, iterations=1, warmup_rounds=0)
    summary = sampler.summary()
    thread_share = sampler.self_cpu_s / sampler.wall_s
    process_share = process_cpu_s / sampler.wall_s
    figures = {
        "children": CHILDREN,
        "interval_s": INTERVAL_S,
        "ticks": sampler.ticks,
        "window_s": round(sampler.wall_s, 3),
        "sampler_thread_cpu_s": round(sampler.self_cpu_s, 4),
        "sampler_thread_share_of_core": round(thread_share, 5),
        "process_cpu_s": round(process_cpu_s, 4),
        "process_share_of_core": round(process_share, 5),
        "ms_per_tick": round(1000 * sampler.self_cpu_s / sampler.ticks, 3),
    }
    benchmark.extra_info.update(figures)
    # also on the test report (report.user_properties), where the terminal summary / JSON can show them
    request.node.user_properties.extend((f"sampler_overhead.{k}", v) for k, v in figures.items())
    assert summary["threads.tree.max"] >= CHILDREN, "the sampler did not see the whole tree"
    assert sampler.self_cpu_s > 0, "the sampler thread's CPU time was not measured"
    assert thread_share < MAX_SHARE_OF_ONE_CORE, figures
    assert process_share < MAX_SHARE_OF_ONE_CORE, figures

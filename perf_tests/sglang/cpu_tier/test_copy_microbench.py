"""Microbenchmarks of the two SHM copy arms (``ShmTensor.create``: fresh segment, fallocate, copy; then unlink),
by size and intra-op thread count.

The under-quota cases run the copies in a child started inside a real ``CpuQuota`` (the quota must not hold pytest
itself), served round by round with the arms alternated (torch buffer, buffer torch, ...), and each round is timed
by pytest-benchmark's ``benchmark`` fixture in pedantic mode (the rig decides the rounds, their order and the quota).
They are judged from pytest-benchmark's own timings: the buffer copy must beat torch's by >= 1.05x in copies/s,
paired by round (``perf_invariant``); pytest-benchmark shows and saves one entry per arm (``--benchmark-json``).
A pedantic run has one look at a fixed count: ``--perf-max-repeats`` (15) rounds. 5 rounds were tried (2026-12-06) and
left a CI run inconclusive at 10.8 MB (1.169x, 99 % interval 0.976-1.399x against the 1.05x bound).
The in-process cases only check each arm's copy bytewise and that it leaves no segment: without a quota no
relation between the arms holds (torch fans out over the CPUs), and a time that no verdict reads is not a test.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch

from engine_fixtures.cpu_tier.copyloop import MB, CopyLoop, round_order
from engine_fixtures.isolation.leaks import foreign_suite_segment
from engine_fixtures.session.benchmarks import timed_rounds
from engine_fixtures.transport.arms import COPY_ARMS
from engine_fixtures.transport.shm import ShmTensor, list_segments

PREFIX = "perf_mbench_"
CPUS = len(os.sched_getaffinity(0))
SIZES = [pytest.param(1.0, id="1MB"), pytest.param(10.8, id="10.8MB"),
         pytest.param(50.0, id="50MB", marks=pytest.mark.slow)]
# Under a quota the penalty is the idle workers' spin per copy, which a 50 MB copy amortises (0.96-1.13x
# measured): the invariant is claimed for the per-image sizes SGLang copies (1 MB to 25.8 MB).
QUOTA_SIZES = [pytest.param(1.0, id="1MB"), pytest.param(10.8, id="10.8MB")]
THREADS = [pytest.param(1, id="threads=1"), pytest.param(CPUS, id="threads=cpus")]


@pytest.fixture
def intra_op_threads(request: pytest.FixtureRequest) -> Iterator[int]:
    """Set torch's intra-op thread count for the test and restore it after."""
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    try:
        yield request.param
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("intra_op_threads", THREADS, indirect=True)
@pytest.mark.parametrize("mb", SIZES)
@pytest.mark.parametrize("arm", COPY_ARMS)
def test_copy_in_process_is_bytewise_and_leaves_no_segment(arm: str, mb: float, intra_op_threads: int) -> None:
    src = torch.randint(0, 256, (int(mb * MB),), dtype=torch.uint8)
    before = list_segments(PREFIX)
    assert torch.get_num_threads() == intra_op_threads
    ShmTensor.create(src, copy=arm, prefix=PREFIX).discard()
    assert torch.equal(ShmTensor.create(src, copy=arm, prefix=PREFIX).materialize(), src)
    assert {n for n in list_segments(PREFIX) - before if not foreign_suite_segment(n)} == set()


@pytest.mark.cpu_tier
@pytest.mark.cgroup
@pytest.mark.perf
@pytest.mark.parametrize("threads", [pytest.param(CPUS, id="threads=cpus"),
                                     pytest.param(64, id="threads=64", marks=pytest.mark.slow)])
@pytest.mark.parametrize("mb", QUOTA_SIZES)
@pytest.mark.parametrize("quota", [0.5, pytest.param(1.0, marks=pytest.mark.slow)], ids=lambda q: f"quota={q}")
def test_copy_under_quota(quota: float, mb: float, threads: int,  # type: ignore[no-untyped-def]
                          benchmark, perf_settings, perf_invariant) -> None:
    if CPUS < 2:
        pytest.skip("one visible CPU: torch's copy does not fan out, there is no penalty to show")
    label = f"buffer >= 1.05x torch, {mb:g} MB copies, quota {quota:g}, {threads} threads"
    # each arm's round copies ~600 MB (~0.3 s of CPU): several 100 ms CFS periods, so the quota really binds
    copies = max(10, int(600 / mb))
    with CopyLoop.start(mb, threads, quota, copies) as loop:
        seconds = timed_rounds(benchmark, loop.round, round_order(COPY_ARMS, perf_settings.max_repeats), group=label,
                               copies_per_round=copies, mb=mb)
    per_s = {arm: [copies / s for s in rounds] for arm, rounds in seconds.items()}
    perf_invariant(label, "copy_per_s", per_s["torch"], per_s["buffer"], 1.05)

"""pytest-benchmark microbenchmarks of the two SHM copy arms (``ShmTensor.create``: fresh segment, fallocate,
copy; then unlink), by size and intra-op thread count.

In-process cases are timed by pytest-benchmark (``benchmark.pedantic``, fixed rounds). The under-quota
cases run the copy loop in a child started inside a real ``CpuQuota`` (the quota must not hold pytest
itself), alternate the arms per round, and report copies/s per arm and their ratio in
``benchmark.extra_info``; pytest-benchmark times the whole child. Every case checks the copy bytewise.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
import pytest
import torch

from engine_fixtures.mechbench.copyloop import MB, measure_under_quota
from engine_fixtures.transport.shm import COPY_ARMS, ShmTensor, list_segments, sweep_stale

PREFIX = "perf_mbench_"
CPUS = len(os.sched_getaffinity(0))
SIZES = [pytest.param(1.0, id="1MB"), pytest.param(10.8, id="10.8MB"),
         pytest.param(50.0, id="50MB", marks=pytest.mark.slow)]
THREADS = [pytest.param(1, id="threads=1"), pytest.param(CPUS, id="threads=cpus")]
ROUNDS = 15


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
def test_copy_in_process(benchmark, arm: str, mb: float, intra_op_threads: int) -> None:
    src = torch.randint(0, 256, (int(mb * MB),), dtype=torch.uint8)
    before = list_segments(PREFIX)
    benchmark.extra_info.update(arm=arm, mb=mb, threads=intra_op_threads)
    benchmark.pedantic(lambda: ShmTensor.create(src, copy=arm, prefix=PREFIX).discard(), rounds=ROUNDS,
                       iterations=1, warmup_rounds=1)
    assert torch.equal(ShmTensor.create(src, copy=arm, prefix=PREFIX).materialize(), src)
    assert list_segments(PREFIX) - before == frozenset()


@pytest.mark.mechanism
@pytest.mark.cgroup
@pytest.mark.parametrize("threads", [pytest.param(CPUS, id="threads=cpus"),
                                     pytest.param(64, id="threads=64", marks=pytest.mark.slow)])
@pytest.mark.parametrize("mb", SIZES)
@pytest.mark.parametrize("quota", [0.5, pytest.param(1.0, marks=pytest.mark.slow)], ids=lambda q: f"quota={q}")
def test_copy_under_quota(benchmark, quota: float, mb: float, threads: int, perf_settings,
                          request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("slow") and perf_settings.scale != "full":
        pytest.skip("large under-quota copy case: run with --perf-scale full")
    # each arm's round copies ~600 MB (~0.3 s of CPU): several 100 ms CFS periods, so the quota really binds
    rounds, copies = 3, max(10, int(600 / mb))
    try:
        out = benchmark.pedantic(measure_under_quota, args=(mb, threads, quota, rounds, copies), rounds=1,
                                 iterations=1)
    finally:
        sweep_stale(PREFIX)
    ratios = np.asarray(out["buffer"]) / np.asarray(out["torch"])
    benchmark.extra_info.update(
        quota=quota, mb=mb, threads=out["threads"], copies_per_round=copies,
        torch_copies_per_s=float(np.median(out["torch"])), buffer_copies_per_s=float(np.median(out["buffer"])),
        buffer_over_torch_median=float(np.median(ratios)),
        buffer_over_torch_iqr=[float(x) for x in np.percentile(ratios, [25, 75])])
    assert out["threads"] == threads
    assert len(out["torch"]) == len(out["buffer"]) == rounds
    assert min(out["torch"] + out["buffer"]) > 0

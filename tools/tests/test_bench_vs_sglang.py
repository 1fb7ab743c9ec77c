"""Proof of speed (short version of ``python -m tools.studies.bench_vs_sglang``): >= 3x the
requests/s of sglang.bench_serving against the same zero-work stub, judged from the stub's side, in one
interleaved run."""

from __future__ import annotations

import os

import pytest
from rich.console import Console

from tools.studies.bench_vs_sglang import compare, parse_args, side_venv_problem


@pytest.mark.slow
def test_faster_than_sglang_bench_serving() -> None:
    args = parse_args(["--concurrency", "256", "--num-requests", "2000", "--rounds", "1"])
    problem = side_venv_problem(args.venv)
    if problem:
        pytest.skip(problem)
    if not {args.client_cpu, args.stub_cpu} <= os.sched_getaffinity(0):
        pytest.skip(f"needs CPUs {args.client_cpu} and {args.stub_cpu} to pin the client and the stub apart")
    result = compare(args, Console(stderr=True))
    assert result["ratio_requests_per_s"] >= 3.0, result
    assert result["ours_client_sched_delay_p99_ms"] < 2.0, result

"""Self-tests of the mechanism benchmark's failure paths on real processes and a real cgroup: zero completed
requests, a crashing or killed producer, bad arms; nothing leaks on any of them."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import psutil
import pytest

from engine_fixtures.cpu_tier.arms import CpuTierArm, pixel_shape
from engine_fixtures.cpu_tier.driver import run_arms
from engine_fixtures.cpu_tier.producer import MECH_PREFIX
from engine_fixtures.cpu_tier.rig import Rig
from engine_fixtures.errors import ConfigError, MeasurementError, ProcessCrashed
from engine_fixtures.isolation.leaks import foreign_suite_segment, mapped_semaphores, semaphore_files
from engine_fixtures.judge.sequential import Budget
from engine_fixtures.transport.shm import list_segments

SMALL = CpuTierArm(copy="torch", threads="cpus", quota=0.5, resolution=256, concurrency=2)


@pytest.fixture
def rig_stack(tmp_path: Path):
    """A started small rig inside an ExitStack; after the test: no segment, process or cgroup left."""
    before = list_segments(MECH_PREFIX)
    stack = ExitStack()
    rig = Rig.start(SMALL, stack, str(tmp_path), 0)
    pids = (rig.producer.pid, rig.consumer.pid, *rig.quota.pids())
    paths = rig.quota.paths
    try:
        yield rig
    finally:
        stack.close()
        assert {n for n in list_segments(MECH_PREFIX) - before if not foreign_suite_segment(n)} == set()
        assert [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE] == []
        assert [p for p in paths if p.exists()] == []


pytestmark = pytest.mark.cgroup()


def test_pixel_shape_matches_qwen25_vl_formula() -> None:
    assert pixel_shape(1024) == (5476, 1176)  # 1036 / 14 = 74 patches per side
    assert pixel_shape(512) == (1296, 1176)
    assert pixel_shape(2048) == (21316, 1176)


@pytest.mark.parametrize("kwargs", [{"copy": "memcpy"}, {"threads": "7"}, {"quota": 0}, {"concurrency": 0},
                                    {"wait_policy": "spin"}])
def test_bad_arm_is_a_config_error(kwargs) -> None:
    with pytest.raises(ConfigError, match=r"use|must be"):
        CpuTierArm(**kwargs)


def test_rig_window_measures_and_maps_no_semaphore(rig_stack: Rig) -> None:
    m = rig_stack.window(4)
    assert m["requests_per_s"] > 0
    assert m["latency_p50_ms"] > 0
    assert m["producer_cpu_cores"] > 0
    assert {"producer_share_of_quota", "throttled_periods", "throttled_ratio"} <= m.keys()
    assert rig_stack.semaphores == set()  # the rig uses no multiprocessing locks/queues/events


def test_zero_completed_requests_raise_measurement_error(rig_stack: Rig) -> None:
    rig_stack.consumer.proc.send_signal(signal.SIGKILL)
    rig_stack.consumer.proc.wait(timeout=30)
    with pytest.raises(MeasurementError, match=r"zero completed requests.*consumer connection closed"):
        rig_stack.window(4)


def test_producer_crash_raises_with_log_tail(rig_stack: Rig) -> None:
    rig_stack.producer.proc.stdin.write(json.dumps({"window": "four"}) + "\n")  # a malformed command: a real crash
    rig_stack.producer.proc.stdin.flush()
    with pytest.raises(ProcessCrashed, match=r"(?s)died during a window.*exit code 1.*ValueError"):
        rig_stack.window(4)


def test_killed_producer_raises_process_crashed(rig_stack: Rig) -> None:
    rig_stack.producer.proc.send_signal(signal.SIGKILL)
    with pytest.raises(ProcessCrashed, match="exit code -9"):
        rig_stack.window(4)


def test_run_arms_rejects_bad_plans() -> None:
    with pytest.raises(ConfigError, match="initial <= maximum"):
        run_arms([SMALL], Budget(0, 1, 1))
    with pytest.raises(ConfigError, match="same arm twice"):
        run_arms([SMALL, SMALL], Budget.fixed(1))
    with pytest.raises(ConfigError, match="control arm"):
        run_arms([SMALL], Budget.fixed(1), control=CpuTierArm(copy="control"))


def test_mapped_semaphores_sees_a_live_multiprocessing_lock() -> None:
    """The leak check's semaphore view is real: a spawn-context Lock maps a /dev/shm/sem.mp-* file."""
    code = ("import multiprocessing as mp, sys; lock = mp.get_context('spawn').Lock(); print('ok', flush=True); "
            "sys.stdin.read()")
    with subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True) as proc:
        try:
            assert proc.stdout.readline().strip() == "ok"
            inodes = mapped_semaphores((proc.pid,))
            live = semaphore_files(inodes)
        finally:
            proc.stdin.close()
            proc.wait(timeout=30)
    assert len(live) == 1, (inodes, live)
    assert live[0].startswith("sem.mp-")
    assert semaphore_files(inodes) == []  # released at a clean exit


def test_run_arms_small_result_uses_registered_metrics() -> None:
    from engine_fixtures.judge.metrics import metric

    (result,) = run_arms([SMALL], Budget.fixed(1), warmup=0, requests=2)
    assert result.scenario == "mech/copy=torch/threads=cpus/quota=0.5/res=256/c=2"
    for name, values in result.samples.items():
        assert metric(name).name == name
        assert len(values) == 1
    assert result.samples["requests_per_s"][0] > 0


def test_control_ratios_injection_and_sequential_rounds() -> None:
    """rel.* metrics are the arm over the control in the same round; an injected spin is recorded and slows the
    arm; rounds grow in steps while the judge says undecided, and stop at the budget."""
    from engine_fixtures.inject import parse_injection

    arms = [CpuTierArm(copy=c, threads="cpus", quota=0.5, resolution=256, concurrency=2) for c in ("torch", "control")]
    looks: list[int] = []

    def undecided(results: list, alpha: float) -> list[str]:
        looks.append(len(results[0].samples["requests_per_s"]))
        assert alpha == pytest.approx(0.01 / 3)
        return ["always"]

    torch_r, control_r = run_arms(arms, Budget(2, 1, 4), warmup=0, requests=4, control=arms[1],
                                  injection=parse_injection("slow:torch=40"), undecided=undecided)
    assert looks == [2, 3, 4]
    ratios = [t / c for t, c in zip(torch_r.samples["requests_per_s"], control_r.samples["requests_per_s"],
                                    strict=True)]
    assert torch_r.samples["rel.requests_per_s"] == pytest.approx(tuple(ratios))
    assert "rel.requests_per_s" not in control_r.samples
    assert torch_r.metadata["injected"] == {"copy_impl": "torch", "spin_ms": 40.0}
    assert torch_r.metadata["rounds"] == 4
    assert torch_r.metadata["undecided_at_budget"] == ["always"]
    assert max(ratios) < 0.8  # 40 ms of CPU per request inside a 0.5-core quota: the arm is clearly slower

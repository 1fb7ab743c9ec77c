"""EngineFactory: reuse by key, one live engine at a time, cgroup sandbox (and what a window under it measures), leak
check after every stop."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from engine_fixtures.engine.factory import EngineFactory, cgroup_prefix
from engine_fixtures.engine.spec import EngineSpec
from engine_fixtures.isolation import run_registry
from engine_fixtures.isolation.cgroups import probe_quota_support
from engine_fixtures.isolation.leaks import LeakSnapshot
from engine_fixtures.isolation.signals import sigkill_and_wait
from engine_fixtures.loadgen.stream import LoadStream
from engine_fixtures.model.modeldir import write_model_dir
from engine_fixtures.scenarios.engine import EngineScenario
from engine_fixtures.scenarios.segment import SegmentPlan, measure_segment
from engine_fixtures.scenarios.timeline import Timeline
from perf_tests.support import launcher
from perf_tests.support.fake_nvml import FakeNvml, fake_nvml

STUB = launcher("stub_engine")
pytestmark = pytest.mark.usefixtures("no_steal_refusal")  # the windows are read here, not refused for steal


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model_dir(tmp_path_factory.mktemp("m") / "qwen-tiny", "tiny")


def test_reuse_by_key_and_replace_when_another_spec_is_asked(model: Path, tmp_path: Path) -> None:
    a = EngineSpec(model, launcher=STUB, name="stub", proof=False, copy="torch")
    before = LeakSnapshot.take(cgroup_prefix(a))
    f = EngineFactory(tmp_path, deadline_s=60.0)
    try:
        b = a.with_(copy="buffer")
        h1 = f.get(a)
        assert f.get(a) is h1  # same key: reused, not restarted
        h2 = f.get(b)  # another key: the first engine is stopped first (max_live=1)
        assert h2 is not h1
        assert not psutil.pid_exists(h1.pid) or psutil.Process(h1.pid).status() == psutil.STATUS_ZOMBIE
        assert f.live() == (h2,)
    finally:
        f.close()
    assert f.live() == ()
    before.assert_no_new(LeakSnapshot.take(cgroup_prefix(a)))


@pytest.mark.skipif(probe_quota_support() is not None, reason=str(probe_quota_support()))
def test_engine_tree_runs_inside_its_cpu_quota_and_the_cgroup_is_removed(model: Path, tmp_path: Path) -> None:
    f = EngineFactory(tmp_path, deadline_s=60.0)
    try:
        h = f.get(EngineSpec(model, launcher=STUB, name="stub", proof=False, cpu_quota=1.5))
        assert h.quota is not None
        inside = set(h.quota.pids())
        tree = {p for pids in h.pids().values() for p in pids}
        assert tree <= inside
        cgroup = h.quota.path
        assert cgroup.exists()
    finally:
        f.close()
    assert not cgroup.exists()


@pytest.mark.skipif(probe_quota_support() is not None, reason=str(probe_quota_support()))
def test_a_window_under_a_quota_yields_both_estimators_of_each_new_family(model: Path, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 46 on the stub engine, in a real 1.5-core cgroup, with the fake NVML: a window yields GPU busy from the
    sample buffer (the periods that ended inside it, 6 a second here) beside the 10 Hz poll's, the tokenizer's SM
    share from the per-process buffer, and each role's share of the quota beside its CPU per request."""
    fake = FakeNvml(switch_after=10**9)
    fake_nvml(monkeypatch, fake)
    f = EngineFactory(tmp_path, deadline_s=60.0)
    try:
        h = f.get(EngineSpec(model, launcher=STUB, name="stub", proof=False, cpu_quota=1.5))
        (root,) = h.pids()["http_server"]
        now = time.time()
        periods = [now + k / 6 for k in range(1, 6 * 120)]
        fake.util_samples = {0: [(t, 62.0 if k % 2 else 58.0) for k, t in enumerate(periods)]}
        fake.proc_samples = {0: [(t, root, 55.0) for t in periods]}
        with LoadStream() as stream:
            plan = SegmentPlan(EngineScenario("stub", concurrency=4, output_tokens=16).workload(), 2, 1.0, 0.3)
            ws = measure_segment(h, stream, plan, Timeline())
    finally:
        f.close()
    for w in ws:
        assert w["gpu_util_mean"] == 40.0  # the fake's poll
        assert w["gpu_util_buffer_mean"] == pytest.approx(60.0, abs=0.5)  # 58 and 62 alternating, each period once
        assert 5 <= w["gpu_util_buffer_periods"] <= 7  # a 1 s window of 1/6 s periods
        assert w["gpu_sm_util.http_server"] == 55.0
        share = w["cpu_share_of_quota.http_server"]
        assert share > 0
        assert share == pytest.approx(w["cpu_cores.http_server"] / 1.5, rel=1e-6)
        assert w["cpu_s_per_request.http_server"] == pytest.approx(w["cpu_cores.http_server"] / w["requests_per_s"])


NEIGHBOUR = """
import json, os, sys
from pathlib import Path
from engine_fixtures.isolation import owner, run_registry
owner.claim()
run_registry.register(Path(sys.argv[1]), Path(sys.argv[1]))
name = f"sgl_shm_neighbour_{os.getpid()}"
Path("/dev/shm", name).write_bytes(b"x")  # made and closed: nobody holds it until its reader opens it
print(json.dumps({"pid": os.getpid(), "segment": name}), flush=True)
sys.stdin.read()  # runs until the test closes the pipe
Path("/dev/shm", name).unlink(missing_ok=True)
"""


def test_a_live_neighbours_segment_is_left_alone_and_the_engines_own_leftover_goes(model: Path,
                                                                                  tmp_path: Path) -> None:
    """Another run on the box (not started by this one: setsid --fork re-parents it) makes an SGLang-named segment
    while this engine runs; the engine is SIGKILLed, so its own pool leaks. The stop's leak check removes and
    reports the pool (its processes held it) and leaves the neighbour's segment alone, blaming nothing on it."""
    state = run_registry.state_dir(tmp_path / "state")
    findings: list[str] = []
    f = EngineFactory(tmp_path / "engines", deadline_s=60.0, on_finding=findings.append, state_dir=state)
    spec = EngineSpec(model, launcher=STUB, name="stub", proof=False, extra_args=("--stub-shm-mb", "1"))
    neighbour = None
    try:
        h = f.get(spec)
        pool = next(n for n in os.listdir("/dev/shm") if n.startswith("sgl_shm_stub_") and n in h.log_tail())
        neighbour = subprocess.Popen(["setsid", "--fork", sys.executable, "-c", NEIGHBOUR, str(state)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert neighbour.stdout is not None
        them = json.loads(neighbour.stdout.readline())
        assert them["pid"] not in {p.pid for p in psutil.Process().children(recursive=True)}
        sigkill_and_wait([h.pid], 10)  # the engine dies without unlinking its pool
        assert (Path("/dev/shm") / pool).exists()
        f.release(spec)  # no LeakError: the neighbour's segment is not this engine's
        assert not (Path("/dev/shm") / pool).exists()
        # (what to look at if it fails: whether the neighbour still ran, and what the leak check said)
        assert (Path("/dev/shm") / them["segment"]).exists(), (f"neighbour alive: {psutil.pid_exists(them['pid'])}",
                                                               findings)
        assert any(pool in x and "the fixture removed them" in x and them["segment"] not in x for x in findings)
        # (other suites on this box may have segments left alone in the same finding)
        assert any("left alone" in x and them["segment"] in x for x in findings), findings
        assert not any(pool in x for x in findings if "left alone" in x), findings
    finally:
        f.close()
        if neighbour is not None:
            assert neighbour.stdin is not None
            assert neighbour.stdout is not None
            neighbour.stdin.close()  # the neighbour ends and unlinks its segment
            neighbour.stdout.read()  # EOF: it has exited
            neighbour.stdout.close()
            neighbour.wait(timeout=30)

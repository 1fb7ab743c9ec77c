"""Recovery after the runner itself is killed: SIGKILL a pytest run while its engine runs under a quota; the next
run finds what was left, removes it, says so in one line, and leaves a concurrent live run's objects alone.

Real on the CPU box: a pytest subprocess starts the stub engine through the EngineFactory inside a CpuQuota
(cgroup v1 here, or a fake v2 tree under --perf-cgroup-parent), with an SGLang-named /dev/shm pool, and holds
an atomic results write half done when it is killed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from engine_fixtures.isolation import owner
from engine_fixtures.isolation.leaks import SHM_DIR
from engine_fixtures.isolation.machine_lock import MachineLock
from engine_fixtures.isolation.signals import TerminateAsInterrupt, sigkill_and_wait
from perf_tests.process_wait import wait_for
from perf_tests.support import child_env, launcher

pytest_plugins = ("pytester",)

KILLED = """
import json, os, threading
from pathlib import Path
from engine_fixtures.engine.factory import EngineFactory
from engine_fixtures.engine.spec import EngineSpec
from engine_fixtures.model.modeldir import write_model_dir
from engine_fixtures.store.files import atomic_writer

def test_engine_under_a_quota_until_the_runner_is_killed(tmp_path, perf_settings):
    model = write_model_dir(tmp_path / "m" / "qwen-tiny", "tiny")
    factory = EngineFactory(tmp_path / "engines", 60.0)
    spec = EngineSpec(model, launcher=("-m", "perf_tests.support.stub_engine"), name="recover", proof=False,
                      cpu_quota=0.5, extra_args=("--stub-shm-mb", "1"))
    h = factory.get(spec)
    pool = next(n for n in os.listdir("/dev/shm") if n.startswith("sgl_shm_stub_") and n in h.log_tail())
    tree = sorted({h.pid, *(p for pids in h.pids().values() for p in pids)})
    with atomic_writer(perf_settings.results_dir / "results-partial.json") as fh:
        fh.write('{"partial": ')
        fh.flush()
        Path(READY_PATH).write_text(json.dumps({"tree": tree, "cgroups": [str(p) for p in h.quota.paths],
                                               "pool": pool}))
        threading.Event().wait()  # the job is cancelled here: SIGKILL
"""


NEXT = """
import json
from pathlib import Path
from engine_fixtures.session.run_guard import GUARD_KEY

def test_next(request):
    r = request.config.stash[GUARD_KEY].report
    Path(REPORT_PATH).write_text(json.dumps({"runs": [x.token for x in r.runs], "processes": list(r.processes),
                                             "cgroups": list(r.cgroups), "shm": list(r.shm), "files": list(r.files),
                                             "kept": r.kept}))
"""


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def fake_v2(root: Path) -> Path:
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpu io memory\n")
    (root / "cgroup.subtree_control").write_text("cpu\n")
    return root


@pytest.mark.parametrize("tree", [pytest.param("v1", marks=pytest.mark.cgroup), "fake-v2"])
def test_next_run_removes_what_the_killed_run_left(pytester: pytest.Pytester, tmp_path: Path, tree: str) -> None:
    state, results, ready = tmp_path / "state", tmp_path / "results", tmp_path / "ready.json"
    args = ["--perf-state-dir", str(state), "--perf-results-dir", str(results)]
    if tree == "fake-v2":
        args += ["--perf-cgroup-parent", str(fake_v2(tmp_path / "v2"))]
    killed_test = pytester.makepyfile(test_killed=KILLED.replace("READY_PATH", repr(str(ready))))
    log1 = tmp_path / "run1.log"
    with open(log1, "w") as out:
        run1 = pytester.popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", str(killed_test), *args],
                              stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    wait_for(ready.exists, run1, context=lambda: log1.read_text()[-3000:])
    facts = json.loads(ready.read_text())
    token = owner.RunOwner.of_pid(run1.pid)
    assert token is not None
    bystander = subprocess.Popen([sys.executable, *launcher("holder_run"), "--results",
                                  str(results), "--state", str(state), "--ready", str(tmp_path / "live.json"),
                                  "--quota", "0.5", *(["--cgroup-parent", args[-1]] if tree == "fake-v2" else [])],
                                 env=child_env())
    try:
        wait_for((tmp_path / "live.json").exists, bystander, context=lambda: log1.read_text()[-3000:])
        live = json.loads((tmp_path / "live.json").read_text())
        # While run1 lives nobody may touch what it owns (another suite's sweeps on this box included).
        assert all(alive(p) for p in facts["tree"])
        assert all(Path(p).is_dir() for p in facts["cgroups"])
        assert (SHM_DIR / facts["pool"]).exists()

        run1.send_signal(signal.SIGKILL)  # the job is cancelled
        assert run1.wait(timeout=30) == -signal.SIGKILL
        # From here any run's sweep may remove run1's engine tree, sandbox and pool (another suite's session start
        # on this box too: a dead run's leftovers are anyone's to remove). Its half-written file and record lie in
        # this test's own directories, where only run2 looks.
        temps = [p for p in results.iterdir() if p.name.startswith(f".results-partial.json.{token.token}.")]
        assert len(temps) == 1
        assert (state / "runs" / f"{token.token}.json").exists()

        report_path = tmp_path / "run2-sweep.json"
        run2 = pytester.runpytest_subprocess(*args, pytester.makepyfile(
            test_next=NEXT.replace("REPORT_PATH", repr(str(report_path)))))
        run2.assert_outcomes(passed=1)
        line = [x for x in run2.outlines if x.startswith("perf sweep:")]
        assert len(line) == 1, run2.outlines
        report = json.loads(report_path.read_text())  # run2's sweep report, as its session holds it
        assert token.token in report["runs"]
        assert report["files"] == [str(temps[0])]
        assert re.fullmatch(
            rf"perf sweep: removed what \d+ dead runs? \(.*run pid {run1.pid} \(started [^)]* UTC\).*\) left: "
            r"(.*, )?1 half-written file(; left alone: .*)?", line[0]), line[0]
        assert not any(alive(p) for p in facts["tree"])
        assert not any(Path(p).exists() for p in facts["cgroups"])
        assert not (SHM_DIR / facts["pool"]).exists()
        assert not temps[0].exists()
        # The record goes, unless the sweep left owner-less engine segments alone for a later sweep (another run,
        # the bystander here, may own them: another suite on this box makes such segments meanwhile).
        if "engine /dev/shm segment(s) with no owner" not in report["kept"]:
            assert not (state / "runs" / f"{token.token}.json").exists()
        # The concurrent live run keeps everything it owns, and the sweep does not claim any of it.
        assert alive(live["child"])
        assert all(Path(p).is_dir() for p in live["cgroups"])
        assert (SHM_DIR / live["segment"]).exists()
        assert (results / live["temp"]).exists()
        assert live["token"] not in report["runs"]
        assert live["child"] not in report["processes"]
        assert not {Path(p).name for p in live["cgroups"]} & set(report["cgroups"])
        assert live["segment"] not in report["shm"]
        assert str(results / live["temp"]) not in report["files"]
        if report["runs"] == [token.token]:  # nothing else dead on the box: all it removed was run1's
            assert set(report["processes"]) <= set(facts["tree"])
            assert set(report["cgroups"]) <= {Path(p).name for p in facts["cgroups"]}
            assert set(report["shm"]) <= {facts["pool"]}
    finally:
        run1.kill()
        run1.wait(timeout=30)
        bystander.send_signal(signal.SIGTERM)
        bystander.wait(timeout=60)
        sigkill_and_wait(facts["tree"] if ready.exists() else [], 10)


CANCELLED = """
import json, sys, threading
from pathlib import Path
import pytest
from engine_fixtures.isolation import owner
from engine_fixtures.isolation.cgroups import CpuQuota
from engine_fixtures.isolation.process import LaunchSpec, Supervised, curated_env
from engine_fixtures.store.files import atomic_writer

@pytest.mark.perf
def test_held_until_the_job_is_cancelled(perf_settings):
    with owner.temp_dir("held") as tmp, CpuQuota(0.5, name="held") as quota:
        spec = LaunchSpec((sys.executable, "-c", "import threading; threading.Event().wait()"), Path(tmp, "child.log"),
                          curated_env(), name="held child")
        with Supervised.start(spec, quota) as child, \
                atomic_writer(perf_settings.results_dir / "results-held.json") as fh:
            fh.write("{")
            fh.flush()
            Path(READY_PATH).write_text(json.dumps({"tmp": tmp, "child": child.pid,
                                                   "cgroups": [str(p) for p in quota.paths]}))
            threading.Event().wait()  # the job is cancelled here: SIGTERM, as CI runners send first
"""


@pytest.mark.cgroup
def test_a_cancelled_run_cleans_up_on_sigterm_like_on_ctrl_c(pytester: pytest.Pytester, tmp_path: Path) -> None:
    """SIGTERM to pytest unwinds like SIGINT: its child stopped, its sandbox, temp dir, half-written file, run
    record and lock gone at once, nothing left for the next run's sweep."""
    state, results, ready = tmp_path / "state", tmp_path / "results", tmp_path / "ready.json"
    test = pytester.makepyfile(test_cancelled=CANCELLED.replace("READY_PATH", repr(str(ready))))
    log = tmp_path / "run.log"
    with open(log, "w") as out:
        run = pytester.popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", str(test), "--perf-state-dir",
                              str(state), "--perf-results-dir", str(results)], stdout=out,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    facts: dict = {}
    try:
        wait_for(ready.exists, run, context=lambda: log.read_text()[-3000:])
        facts = json.loads(ready.read_text())
        assert alive(facts["child"])
        assert all(Path(p).is_dir() for p in facts["cgroups"])
        assert list((state / "runs").glob("*.json"))
        run.send_signal(signal.SIGTERM)
        assert run.wait(timeout=60) == pytest.ExitCode.INTERRUPTED, log.read_text()[-3000:]
        assert "KeyboardInterrupt: SIGTERM: stopping like Ctrl-C" in log.read_text()
        assert not alive(facts["child"])
        assert not [p for p in facts["cgroups"] if Path(p).exists()]
        assert not Path(facts["tmp"]).exists()
        assert not [p.name for p in results.iterdir() if p.name.endswith(".tmp")] if results.exists() else True
        assert not list((state / "runs").iterdir())
        lock = MachineLock(state / "lock")
        assert lock.acquire(0) == "acquired"
        lock.release()
    finally:
        run.kill()
        run.wait(timeout=30)
        sigkill_and_wait([facts["child"]] if facts else [], 10)


def test_sigterm_is_an_interrupt_once_and_the_old_handler_comes_back() -> None:
    old = signal.getsignal(signal.SIGTERM)
    term = TerminateAsInterrupt()
    assert term.install()
    try:
        with pytest.raises(KeyboardInterrupt, match="SIGTERM"):  # the handler runs in this thread at once
            os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)  # a second one while it unwinds: ignored, the cleanup goes on
        assert term.received == 2
    finally:
        term.restore()
    assert signal.getsignal(signal.SIGTERM) is old

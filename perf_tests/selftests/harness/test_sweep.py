"""sweep.py: a killed run's process tree, sandbox, segments and half-written files go; a live run's stay.

The runs here are real (``perf_tests.support.holder_run``): a supervised child inside a real CpuQuota
(cgroup v1 on the CPU box, or a fake v2 tree under --perf-cgroup-parent) mapping an SGLang-named segment,
and an atomic write left half done. The kill is SIGKILL.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from engine_fixtures.engine.factory import ENGINE_SHM_PREFIXES
from engine_fixtures.isolation import owner, run_registry
from engine_fixtures.isolation import sweep as sweep_module
from engine_fixtures.isolation.leaks import SHM_DIR
from engine_fixtures.isolation.signals import sigkill_and_wait
from engine_fixtures.isolation.sweep import sweep
from engine_fixtures.store.files import atomic_write_text
from perf_tests.support import child_env, launcher

READY_S = 60.0


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


class Holder:
    """One holder run: its process and what it reported holding."""

    def __init__(self, proc: subprocess.Popen[bytes], facts: dict) -> None:
        self.proc = proc
        self.facts = facts

    @property
    def token(self) -> str:
        return str(self.facts["token"])

    def things(self, results: Path) -> dict[str, bool]:
        """Which of its objects still exist."""
        return {"child": not gone(self.facts["child"]),
                "cgroups": any(Path(p).exists() for p in self.facts["cgroups"]),
                "segment": (SHM_DIR / self.facts["segment"]).exists(),
                "temp": (results / self.facts["temp"]).exists(),
                "record": Path(self.facts["record"]).exists()}


@pytest.fixture
def holders(tmp_path: Path) -> Iterator:
    started: list[Holder] = []

    def start(results: Path, state: Path, *extra: str) -> Holder:
        ready = tmp_path / f"ready-{len(started)}.json"
        proc = subprocess.Popen([sys.executable, *launcher("holder_run"), "--results",
                                 str(results), "--state", str(state), "--ready", str(ready), *extra],
                                stderr=subprocess.PIPE, env=child_env())
        end = time.monotonic() + READY_S
        while not ready.exists():
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < end, f"holder run not ready within {READY_S} s"
            with pytest.raises(subprocess.TimeoutExpired):
                proc.wait(timeout=0.1)
        holder = Holder(proc, json.loads(ready.read_text()))
        started.append(holder)
        return holder

    yield start
    for h in started:  # a clean stop for the ones the test left alive
        if h.proc.poll() is None:
            h.proc.send_signal(signal.SIGTERM)
            h.proc.wait(timeout=30)
        sigkill_and_wait([h.facts["child"]], 10)
        if h.proc.stderr:
            h.proc.stderr.close()


def _kill(h: Holder) -> None:
    h.proc.kill()
    assert h.proc.wait(timeout=30) == -signal.SIGKILL


@pytest.mark.cgroup
def test_killed_runs_leftovers_go_and_a_live_runs_stay(tmp_path: Path, holders, cgroup_support) -> None:
    results, state = tmp_path / "results", tmp_path / "state"
    results.mkdir()
    dead = holders(results, state, "--quota", "0.5")
    live = holders(results, state, "--quota", "0.5")
    _kill(dead)
    left = dead.things(results)  # the kill left its half-written file and record (only this test looks at those)
    assert left["temp"], left
    assert left["record"], left

    report = sweep(results, state, ENGINE_SHM_PREFIXES)

    # The sweep is machine-wide: it also takes what other suites' dead runs left on this box (their self-tests kill
    # runs too), and one of their session-start sweeps may take some of this dead run's objects first: by design,
    # any run removes a dead run's leftovers. So the report is read for this test's two runs only.
    assert dead.token in [r.token for r in report.runs]
    assert live.token not in [r.token for r in report.runs]
    assert report.files == (str(results / dead.facts["temp"]),)  # only this sweep looks in this results dir
    assert not any(dead.things(results).values()), dead.things(results)
    assert all(live.things(results).values()), live.things(results)  # the live run is never touched
    assert live.facts["child"] not in report.processes
    assert not {Path(p).name for p in live.facts["cgroups"]} & set(report.cgroups)
    assert live.facts["segment"] not in report.shm
    assert re.fullmatch(rf"perf sweep: removed what \d+ dead runs? \(.*run pid {dead.proc.pid} \(started [^)]* "
                        r"UTC\).*\) left: (.*, )?1 half-written file", report.line()), report.line()
    again = sweep(results, state, ENGINE_SHM_PREFIXES)  # nothing of this test's runs twice
    assert dead.token not in [r.token for r in again.runs]
    assert again.files == ()
    assert all(live.things(results).values()), live.things(results)


def _fake_v2(root: Path) -> Path:
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpu io memory\n")
    (root / "cgroup.subtree_control").write_text("cpu\n")
    return root


def test_killed_runs_sandbox_in_a_fake_v2_tree_goes(tmp_path: Path, holders) -> None:
    results, state, v2 = tmp_path / "results", tmp_path / "state", _fake_v2(tmp_path / "v2")
    results.mkdir()
    dead = holders(results, state, "--quota", "0.5", "--cgroup-parent", str(v2))
    (sandbox,) = [Path(p) for p in dead.facts["cgroups"]]
    assert sandbox.parent == v2
    assert (sandbox / "cpu.max").read_text() == "50000 100000"
    assert (sandbox / "cgroup.procs").read_text() == str(dead.facts["child"])  # the child joined before exec
    _kill(dead)
    report = sweep(results, state, ENGINE_SHM_PREFIXES, cgroup_roots=(v2,))
    assert sandbox.name in report.cgroups  # with any other suite's dead sandboxes on this box
    assert not any(dead.things(results).values()), dead.things(results)


def _until_clock_passes(t: float) -> None:
    while (left := t - time.time()) > 0:
        threading.Event().wait(left)


SWEEP_AS_NEW_RUN = """
import json, sys
from pathlib import Path
from engine_fixtures.isolation import owner
from engine_fixtures.isolation.sweep import sweep
from engine_fixtures.store.files import atomic_write_text
owner.claim()
r = sweep(None, Path(sys.argv[1]), (sys.argv[2],))
print(json.dumps({"shm": r.shm, "kept": r.kept}))
"""


def test_ownerless_engine_segment_goes_only_when_no_live_run_could_own_it(tmp_path: Path) -> None:
    state = run_registry.state_dir(tmp_path / "state")
    exited = subprocess.Popen([sys.executable, "-c", "pass"])
    dead = owner.RunOwner.of_pid(exited.pid)
    exited.wait(timeout=30)
    assert dead is not None
    record = {"pid": dead.pid, "start_cs": dead.start_cs, "started": "", "command": "pytest", "cwd": "/",
              "results_dir": str(tmp_path)}
    (state / "runs" / f"{dead.token}.json").write_text(json.dumps(record))
    # An SGLang-named segment under a prefix of this test's own: the sweep here looks at that prefix only, so it
    # never takes another suite's segments on this box, nor does another suite's copy of this test take this one.
    prefix = f"sgl_shm_sweeptest_{uuid.uuid4().hex[:12]}_"
    name = f"{prefix}{os.getpid()}"
    (SHM_DIR / name).write_bytes(b"x")  # unheld, made after the dead run started
    # A process's start time is counted from the boot time in whole seconds: up to 1 s early on the wall clock.
    _until_clock_passes((SHM_DIR / name).stat().st_ctime + 1.05)
    try:
        me = owner.current()  # this pytest run is alive and started before the segment: it may own it
        (state / "runs" / f"{me.token}.json").write_text(json.dumps({**record, "pid": me.pid,
                                                                      "start_cs": me.start_cs}))
        out = json.loads(subprocess.run([sys.executable, "-c", SWEEP_AS_NEW_RUN, str(state), prefix], check=True,
                                        capture_output=True, text=True, timeout=60).stdout)
        assert out["shm"] == []
        assert "engine /dev/shm segment(s) with no owner" in out["kept"]
        assert (SHM_DIR / name).exists()
        (state / "runs" / f"{me.token}.json").unlink()  # no live run left: only the dead one can have made it
        out = json.loads(subprocess.run([sys.executable, "-c", SWEEP_AS_NEW_RUN, str(state), prefix], check=True,
                                        capture_output=True, text=True, timeout=60).stdout)
        if "SGLang process" in out["kept"]:  # another suite on this box runs an SGLang-titled process right now
            pytest.skip(f"cannot show the removal while {out['kept'].rsplit(', as ', 1)[-1]}")
        assert out["shm"] == [name], out
        assert not (SHM_DIR / name).exists()
    finally:
        (SHM_DIR / name).unlink(missing_ok=True)


def test_a_full_disk_never_stops_a_run_nor_leaves_a_torn_file(small_tmpfs) -> None:  # type: ignore[no-untyped-def]
    disk = small_tmpfs("disk", "1m")
    run_registry.state_dir(disk / "state")
    (disk / "results").mkdir()
    (disk / "results" / "results.json").write_text("old")
    with open(disk / "filler", "wb", buffering=0) as fh, contextlib.suppress(OSError):
        while True:  # until ENOSPC: every block left is taken
            fh.write(b"\0" * 4096)
    path, why = run_registry.register(disk / "state", disk / "results")
    assert path is None
    assert "could not record this run" in why
    assert "No space left on device" in why
    with pytest.raises(OSError, match="No space left"):
        atomic_write_text(disk / "results" / "results.json", "x" * (64 << 10))
    assert (disk / "results" / "results.json").read_text() == "old"  # the old file, never a torn one
    assert [p.name for p in (disk / "results").iterdir()] == ["results.json"]  # no temp file left


def test_a_sandbox_another_sweep_removed_first_is_not_reported_stuck(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Two runs starting at once both sweep the same dead run: the one whose rmdir finds the sandbox gone already
    neither counts it as removed nor says it "would not go"."""
    exited = subprocess.Popen([sys.executable, "-c", "pass"])
    dead = owner.RunOwner.of_pid(exited.pid)
    exited.wait(timeout=30)
    assert dead is not None
    v2 = _fake_v2(tmp_path / "v2")
    taken = v2 / f"perf-race-{dead.token}-abcdef"  # listed by this sweep, removed by the other one before the rmdir
    monkeypatch.setattr(sweep_module, "_sandboxes", lambda _roots: {taken})
    # The sweep's cgroup step alone: a whole sweep here would also take the dead runs of other suites on this box.
    names, runs, _survivors, stuck, _held = sweep_module._remove_cgroups(owner.current(), (v2,))
    assert stuck == []  # the sweep's line would say "cgroups that would not go"
    assert names == set()  # nor removed by this sweep
    assert runs == set()


MAPS_A_SEGMENT = """
import mmap, os, sys
fd = os.open("/dev/shm/" + sys.argv[1], os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
os.ftruncate(fd, 4096)
mem = mmap.mmap(fd, 4096)
print("ready", flush=True)
sys.stdin.read()
"""


def test_a_segment_held_only_inside_a_dead_sandbox_goes_with_it(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The process step did not see the tree (a concurrent sweep's kill raced its scan, or the process carries no
    marker): the cgroup step kills what is inside the dead run's sandbox, and what it held in /dev/shm goes too."""
    exited = subprocess.Popen([sys.executable, "-c", "pass"])
    dead = owner.RunOwner.of_pid(exited.pid)
    exited.wait(timeout=30)
    assert dead is not None
    name = f"sgl_shm_sweeptest_{uuid.uuid4().hex[:12]}"
    env = {k: v for k, v in os.environ.items() if k != owner.OWNER_ENV}
    child = subprocess.Popen([sys.executable, "-c", MAPS_A_SEGMENT, name], env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "ready\n"
        sandbox = _fake_v2(tmp_path / "v2") / f"perf-race-{dead.token}-abcdef"
        sandbox.mkdir()
        (sandbox / "cgroup.procs").write_text(f"{child.pid}\n")
        # This sweep only: its process step finds nothing, its cgroup step only this sandbox (a whole sweep here
        # would also take other suites' dead runs on this box).
        monkeypatch.setattr(sweep_module, "_dead_processes", lambda _me: {})
        monkeypatch.setattr(sweep_module, "_sandboxes", lambda _roots: {sandbox})
        report = sweep(None, None, ())
        assert child.wait(timeout=30) == -signal.SIGKILL
        assert report.cgroups == (sandbox.name,)
        assert report.shm == (name,)
        assert not (SHM_DIR / name).exists()
    finally:
        child.kill()
        child.wait(timeout=30)
        for pipe in (child.stdin, child.stdout):
            if pipe is not None:
                pipe.close()
        (SHM_DIR / name).unlink(missing_ok=True)


def test_a_dead_runs_temp_dir_goes_and_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A killed run's temp dir (its sockets and child logs, ``owner.temp_dir``) goes with the run; a live run's and
    an unowned one (older versions) stay."""
    exited = subprocess.Popen(["true"])
    dead = owner.RunOwner.of_pid(exited.pid)
    exited.wait(timeout=30)
    assert dead is not None
    state, tmp = run_registry.state_dir(tmp_path / "state"), tmp_path / "tmp"  # the dead run's own TMPDIR
    tmp.mkdir()
    record = {"pid": dead.pid, "start_cs": dead.start_cs, "started": "", "command": "pytest", "cwd": "/",
              "results_dir": str(tmp_path / "results"), "tmp_dir": str(tmp)}
    (state / "runs" / f"{dead.token}.json").write_text(json.dumps(record))
    left = tmp / f"perf-mech-{dead.token}-k2j4_x9q"
    left.mkdir()
    (left / "producer-0.log").write_text("...")
    monkeypatch.chdir(left)  # a socket's path is short: bound relative to its directory
    with socket.socket(socket.AF_UNIX) as s:  # a listener's socket file outlives its process
        s.bind("c0.sock")
    monkeypatch.chdir(tmp_path)
    live = tmp / f"perf-mech-{owner.current().token}-abcdefgh"
    unowned = tmp / "perf-mech-abcdefgh"
    live.mkdir()
    unowned.mkdir()
    assert (left / "c0.sock").is_socket()

    report = sweep(None, state)

    assert not left.exists()
    assert str(left) in report.temp_dirs
    assert dead.token in [r.token for r in report.runs]
    assert re.search(r"left: (.*, )?\d+ temp dirs?", report.line()), report.line()
    assert live.is_dir()
    assert unowned.is_dir()
    assert not (state / "runs" / f"{dead.token}.json").exists()
    with owner.temp_dir("mech") as mine:  # the suite's own temp dirs carry the run's token
        assert owner.owner_of_temp_dir(Path(mine).name) == owner.current()

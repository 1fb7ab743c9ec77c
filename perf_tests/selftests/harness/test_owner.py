"""owner.py: every process tree, sandbox and temp file names the run that made it (pid and start time)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from engine_fixtures.isolation import owner
from engine_fixtures.isolation.cgroups import CpuQuota, owner_of_sandbox
from engine_fixtures.isolation.process import LaunchSpec, Supervised, curated_env
from engine_fixtures.store.files import atomic_writer


def test_token_round_trips_and_a_reused_pid_is_another_run() -> None:
    me = owner.RunOwner.of_pid(os.getpid())
    assert me is not None
    assert owner.RunOwner.parse(me.token) == me
    assert me.alive()
    assert not owner.RunOwner(me.pid, me.start_cs - 1).alive()  # same pid, other start: not this process
    assert owner.RunOwner.parse("nonsense") is None


def test_a_wall_clock_step_leaves_a_live_run_alive(monkeypatch: pytest.MonkeyPatch) -> None:
    """The start comes from the boot clock: a step of the wall clock (NTP, a VM restored from a snapshot), which
    moves psutil's boot time and so every create_time(), must not make a live run look dead to its neighbours
    (CI, 2026-12-04: a live neighbour's segment was taken for a leftover and removed)."""
    me = owner.RunOwner.of_pid(os.getpid())
    assert me is not None
    stepped = psutil.boot_time() + 5.0
    monkeypatch.setattr(psutil, "boot_time", lambda: stepped)
    monkeypatch.setattr(psutil._pslinux, "boot_time", lambda: stepped)
    assert round(psutil.Process(os.getpid()).create_time() * 100) != me.start_cs  # the old token would move
    assert me.alive()
    assert owner.RunOwner.of_pid(os.getpid()) == me
    assert abs(me.epoch_s() - psutil.Process(os.getpid()).create_time()) < 0.02


def test_an_older_versions_wall_clock_token_is_still_recognised() -> None:
    legacy = owner.RunOwner(os.getpid(), round(psutil.Process(os.getpid()).create_time() * 100))
    assert legacy.alive()
    assert not owner.RunOwner(legacy.pid, legacy.start_cs - 1).alive()
    assert legacy.started() == owner.RunOwner.of_pid(os.getpid()).started()  # type: ignore[union-attr]


def test_an_exited_process_is_a_dead_run() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    run = owner.RunOwner.of_pid(child.pid)
    assert run is not None
    child.wait(timeout=30)
    assert not run.alive()


def _wait_for_environ(pid: int, deadline_s: float = 10.0) -> None:
    """Right after exec, /proc/PID/environ reads empty for a moment (the kernel is still laying out the stack)."""
    end = time.monotonic() + deadline_s
    proc = psutil.Process(pid)
    while not Path(f"/proc/{pid}/environ").read_bytes() and time.monotonic() < end:
        with contextlib.suppress(psutil.TimeoutExpired):
            proc.wait(timeout=0.02)


def test_supervised_children_carry_the_runs_token(tmp_path: Path) -> None:
    code = ("import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', 'import sys; sys.stdin.read()']); "
            "print(p.pid, flush=True); p.wait()")
    spec = LaunchSpec((sys.executable, "-c", code), tmp_path / "c.log", curated_env(), stdio="pipes", text=True)
    with Supervised.start(spec) as sup:
        assert sup.proc.stdout is not None
        grandchild = int(sup.proc.stdout.readline())
        _wait_for_environ(grandchild)
        assert owner.owner_of_process(sup.pid) == owner.current()
        assert owner.owner_of_process(grandchild) == owner.current()  # inherited, not only the root's


def test_sandbox_and_temp_names_carry_the_token(tmp_path: Path) -> None:
    (tmp_path / "cpu.cfs_quota_us").write_text("-1")
    q = CpuQuota(None, name="stub", root=tmp_path)
    assert q.name.startswith(f"perf-stub-{owner.current().token}-")
    assert owner_of_sandbox(q.name) == owner.current()
    assert owner_of_sandbox("perf-stub-1a2b3c4d") is None  # an older version's name: ownership unknown
    with atomic_writer(tmp_path / "results.json") as fh:
        fh.write("{")
        (tmp,) = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
        assert owner.owner_of_temp(tmp.name) == owner.current()
    assert not tmp.exists()
    assert owner.owner_of_temp(".results.json.abc123.tmp") is None

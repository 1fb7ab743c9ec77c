"""process.py: start, readiness, crash detection, tree shutdown and ports, with real processes."""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from engine_fixtures.errors import ConfigError, ProcessCrashed, ProcessStartError
from engine_fixtures.isolation.cgroups import CpuQuota
from engine_fixtures.isolation.leaks import no_leaks
from engine_fixtures.isolation.process import (
    LaunchSpec,
    Supervised,
    curated_env,
    free_port,
    port_in_use,
    require_free_port,
)
from engine_fixtures.isolation.signals import describe_exit, wait_exited
from perf_tests import support

PROC_TREE = Path(support.__file__).with_name("proc_tree.py")
Starter = Callable[..., Supervised]


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Starter]:
    """Start supervised commands; every one is stopped at teardown, also if the test failed."""
    started: list[Supervised] = []

    def run(*argv: str, sandbox=None, name: str = "") -> Supervised:
        spec = LaunchSpec(argv=argv, log_path=tmp_path / f"{len(started)}.log", name=name)
        sup = Supervised.start(spec, sandbox)
        started.append(sup)
        return sup

    yield run
    for sup in started:
        sup.stop(grace_s=2)


def _tree(start: Starter, tmp_path: Path, *flags: str, titles: tuple[str, ...] = ("sglang::scheduler_TP0",),
          sandbox=None) -> tuple[Supervised, Path]:
    ready = tmp_path / "ready"
    argv = [sys.executable, str(PROC_TREE), "--ready-file", str(ready), *flags]
    for t in titles:
        argv += ["--title", t]
    sup = start(*argv, sandbox=sandbox, name="tree")
    sup.wait_ready(ready.exists, deadline_s=60)
    return sup, ready


def test_curated_env_copies_only_passthrough_and_extra() -> None:
    source = {"PATH": "/bin", "HOME": "/root", "HF_HOME": "/hf", "LC_ALL": "C", "AWS_SECRET": "x",
              "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "0"}
    env = curated_env({"PERF_ARMS_COPY": "numpy"}, source=source)
    assert env == {"PATH": "/bin", "HOME": "/root", "HF_HOME": "/hf", "LC_ALL": "C",
                   "CUDA_VISIBLE_DEVICES": "0", "PERF_ARMS_COPY": "numpy"}
    assert curated_env(passthrough=("PATH",), source=source) == {"PATH": "/bin"}


def test_launch_spec_validates_and_names() -> None:
    with pytest.raises(ConfigError, match="argv is empty"):
        LaunchSpec(argv=(), log_path=Path("x.log"))
    spec = LaunchSpec(argv=("/usr/bin/env", 3), log_path=Path("x.log"))  # type: ignore[arg-type]
    assert (spec.argv, spec.name, spec.command) == (("/usr/bin/env", "3"), "env", "/usr/bin/env 3")


def test_launch_spec_rejects_unknown_stdio() -> None:
    with pytest.raises(ConfigError, match=r"'log'.*'pipes'"):
        LaunchSpec(argv=("true",), log_path=Path("x.log"), stdio="tty")


def test_pipes_in_the_callers_session_with_stderr_to_the_log(tmp_path: Path) -> None:
    """``stdio="pipes"``: a line protocol over stdin/stdout, stderr in the log; ``new_session=False`` keeps
    the child in this session; ``stop()`` still stops it and closes the pipes."""
    code = "import sys; print(sys.stdin.readline().upper(), end='', flush=True); print('oops', file=sys.stderr)"
    spec = LaunchSpec(argv=(sys.executable, "-c", code), log_path=tmp_path / "c.log", stdio="pipes", text=True,
                      new_session=False)
    with no_leaks(), Supervised.start(spec) as sup:
        assert os.getsid(sup.pid) == os.getsid(0)
        sup.proc.stdin.write("hello\n")
        sup.proc.stdin.flush()
        assert sup.proc.stdout.readline() == "HELLO\n"
        assert sup.proc.wait(timeout=30) == 0
        report = sup.stop()
        assert report.killed == ()
        assert sup.proc.stdin.closed
        assert sup.proc.stdout.closed
    assert "oops" in sup.log_tail()


@pytest.mark.parametrize(("code", "text"), [(None, "still running"), (3, "exited with code 3"),
                                            (-9, "killed by signal SIGKILL (9)"), (-15, "SIGTERM (15)")])
def test_describe_exit(code: int | None, text: str) -> None:
    assert text in describe_exit(code)


def test_wait_exited_counts_a_zombie_as_exited_and_never_reaps_it() -> None:
    """An exited, unreaped process (a zombie: what an orphan is until a slow PID 1 reaps it) is not waited for, and
    stays for its parent to reap with its status; a running one is returned at the timeout. (psutil.wait_procs waits
    until a pid is gone: for an orphan, until PID 1 reaps it, about 2 s late on CI's VMs.)"""
    import subprocess

    exited = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert wait_exited([psutil.Process(exited.pid)], 30.0) == []
        assert psutil.Process(exited.pid).status() == psutil.STATUS_ZOMBIE  # not reaped by the wait
        assert [p.pid for p in wait_exited([psutil.Process(running.pid)], 0.2)] == [running.pid]
        assert exited.wait(timeout=5) == 3  # its parent still gets the real status
    finally:
        running.kill()
        running.wait(timeout=10)


def test_missing_program_is_a_start_error(start: Starter) -> None:
    with pytest.raises(ProcessStartError, match=r"'/nonexistent/engine' not found.*PATH"):
        start("/nonexistent/engine")


def test_crash_before_ready_raises_at_once_with_exit_code_and_log_tail(start: Starter) -> None:
    code = "import sys; print('loading weights', flush=True); print('FATAL: no model at /m'); sys.exit(3)"
    sup = start(sys.executable, "-c", code, name="engine")
    t0 = time.monotonic()
    with pytest.raises(ProcessStartError) as info:
        sup.wait_ready(lambda: False, deadline_s=60)
    waited = time.monotonic() - t0
    msg = str(info.value)
    assert waited < 10, f"an early exit must be reported at once, not at the deadline (took {waited:.1f} s)"
    for part in ("engine", "exited with code 3 before it was ready", "of its 60.0 s budget",
                 "FATAL: no model at /m", "loading weights", str(sup.spec.log_path), "-c"):
        assert part in msg


def test_killed_by_signal_before_ready_names_the_signal(start: Starter) -> None:
    sup = start(sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    with pytest.raises(ProcessStartError, match=r"killed by signal SIGKILL \(9\) before it was ready"):
        sup.wait_ready(lambda: False, deadline_s=60)


def test_never_ready_raises_at_the_deadline_not_after(start: Starter) -> None:
    sup = start("sleep", "1000")
    t0 = time.monotonic()
    with pytest.raises(ProcessStartError, match=r"was not ready after .* of its 1.0 s budget"):
        sup.wait_ready(lambda: False, deadline_s=1.0, interval_s=0.1)
    waited = time.monotonic() - t0
    assert waited >= 1.0, f"gave up after {waited:.2f} s, before its 1.0 s deadline"
    # Generous upper bound (a loaded 2-core box delays wakeups): it catches a wait that ignores the deadline
    # (e.g. one more full interval loop per poll, or the 60 s default), not small scheduling jitter.
    assert waited < 3.0, f"raised {waited:.2f} s after start for a 1.0 s deadline"
    sup.ensure_alive()  # a slow start is not a crash


def test_ready_condition_returns_elapsed(start: Starter, tmp_path: Path) -> None:
    sup, ready = _tree(start, tmp_path)
    assert ready.exists()
    assert 0 < sup.elapsed_s() < 60


def test_ensure_alive_reports_mid_run_crash(start: Starter) -> None:
    sup = start(sys.executable, "-c", "import sys; print('segfault-ish'); sys.exit(5)")
    sup.proc.wait(timeout=30)
    with pytest.raises(ProcessCrashed, match=r"(?s)exited with code 5 while being measured.*segfault-ish"):
        sup.ensure_alive()


def test_stop_terminates_whole_tree(start: Starter, tmp_path: Path) -> None:
    sup, ready = _tree(start, tmp_path, titles=("sglang::scheduler_TP0", "sglang::detokenizer"))
    pids = {int(p) for p in ready.read_text().split()}
    tree = {p.pid for p in psutil.Process(sup.pid).children(recursive=True)}
    assert pids < tree  # the titled children plus multiprocessing's resource tracker
    report = sup.stop(grace_s=10)
    assert report.returncode == -15
    assert report.killed == ()
    assert set(report.terminated) == tree | {sup.pid}
    assert not [p for p in tree if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
    assert sup.stop() is report  # idempotent


def test_stop_sigkills_what_ignores_sigterm(start: Starter, tmp_path: Path) -> None:
    with no_leaks():  # the spawn tree's named semaphores (/dev/shm/sem.mp-*) must not outlive it
        sup, ready = _tree(start, tmp_path, "--ignore-term")
        child = int(ready.read_text())
        report = sup.stop(grace_s=1.0)
    assert report.returncode == -9
    assert {sup.pid, child} <= set(report.killed)
    assert not set(report.terminated) & set(report.killed)
    assert report.elapsed_s >= 1.0
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == "zombie"


def test_stop_reaches_children_in_other_sessions(start: Starter, tmp_path: Path) -> None:
    sup, ready = _tree(start, tmp_path, "--setsid", "--ignore-term")
    child = int(ready.read_text())
    assert os.getsid(child) != os.getsid(sup.pid)
    report = sup.stop(grace_s=0.5)
    assert child in report.killed
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == "zombie"


@pytest.mark.cgroup
def test_sandboxed_from_first_instruction_and_emptied(start: Starter, cpu_quota_factory) -> None:
    q = cpu_quota_factory(0.5, name="proc")
    sup = start("cat", "/proc/self/cgroup", sandbox=q)
    sup.proc.wait(timeout=30)
    assert f"cpu:/{q.name}" in sup.spec.log_path.read_text()  # cat itself ran inside the cgroup


@pytest.mark.cgroup
def test_stop_empties_the_sandbox(start: Starter, tmp_path: Path, cpu_quota_factory) -> None:
    q = cpu_quota_factory(None, name="proc")
    sup, _ready = _tree(start, tmp_path, "--setsid", sandbox=q)
    assert len(q.pids()) >= 3  # root, the titled child, the resource tracker
    sup.stop(grace_s=5)
    assert q.pids() == ()


def test_ports() -> None:
    port = free_port()
    assert not port_in_use(port)
    require_free_port(port)
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        assert port_in_use(port)
        expected = rf"port {port} on 127.0.0.1 is already in use by pid \d+.*free_port"
        with pytest.raises(ConfigError, match=expected):
            require_free_port(port)


TREE_ARGS = ("--setsid", "--title", "sglang::scheduler", "--title", "sglang::detokenizer")


def test_failed_readiness_stops_the_whole_tree(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    argv = (sys.executable, str(PROC_TREE), "--ready-file", str(ready), *TREE_ARGS)
    seen: list[psutil.Process] = []

    def run() -> None:
        with Supervised.start(LaunchSpec(argv, tmp_path / "t.log")) as sup:
            sup.wait_ready(ready.exists, deadline_s=60)
            seen.extend([psutil.Process(sup.pid), *psutil.Process(sup.pid).children(recursive=True)])
            sup.wait_ready(lambda: False, deadline_s=0.2)  # e.g. /health never turns 200

    with pytest.raises(ProcessStartError, match="was not ready"):
        run()
    assert len(seen) == 4  # root, two titled children in their own sessions, the resource tracker
    assert [p.pid for p in seen if p.is_running() and p.status() != psutil.STATUS_ZOMBIE] == []


@pytest.mark.cgroup
def test_failed_readiness_inside_sandbox_leaves_nothing(tmp_path: Path, cgroup_support: str | None) -> None:
    ready = tmp_path / "ready"
    argv = (sys.executable, str(PROC_TREE), "--ready-file", str(ready), *TREE_ARGS)

    def run() -> None:
        with CpuQuota(None, name="failpath") as q, Supervised.start(LaunchSpec(argv, tmp_path / "t.log"), q) as sup:
            sup.wait_ready(ready.exists, deadline_s=60)
            sup.wait_ready(lambda: False, deadline_s=0.2)

    with no_leaks(), pytest.raises(ProcessStartError, match="was not ready"):
        run()  # no descendant, /dev/shm segment or perf-* cgroup survives the failure

"""leaks.py: deliberate leaks of each kind are detected, listed and cleaned up; clean blocks pass."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import psutil
import pytest

from engine_fixtures.errors import LeakError
from engine_fixtures.isolation.cgroups import CpuQuota
from engine_fixtures.isolation.leaks import SHM_DIR, LeakSnapshot, find_cgroups, is_sglang, no_leaks
from engine_fixtures.isolation.signals import sigkill_and_wait

pytest_plugins = ("pytester",)


def _shm_segment() -> Path:
    """A POSIX shared-memory segment (what shm_open creates) that nobody unlinks."""
    path = SHM_DIR / f"perf_leaktest_{os.getpid()}_{uuid.uuid4().hex[:8]}"  # its name says it is this run's
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    os.ftruncate(fd, 4096)
    os.close(fd)
    return path


@pytest.mark.parametrize(("name", "argv", "sglang"), [
    ("sglang::schedul", ["sglang::scheduler_TP0"], True),
    ("python3", ["/usr/bin/python3", "-m", "sglang.launch_server", "--model-path", "m"], True),
    ("python3", ["/usr/bin/python3", "-m", "sglang", "serve"], True),
    ("sglang", ["/venv/bin/sglang", "serve", "--model-path", "m"], True),
    ("python3", ["/venv/bin/python3", "/venv/bin/sglang", "serve"], True),
    ("python", ["python", "/src/sglang/python/sglang/launch_server.py"], True),
    # CI's own tox (its env is named sglang-cpu): read as SGLang, it kept the sweep from removing anything in CI
    ("tox", ["/tmp/v/bin/python", "/tmp/v/bin/tox", "-e", "unit,sglang-cpu"], False),
    ("python3", ["/usr/bin/python3", "-m", "pip", "install", "sglang==0.5.16"], False),
    ("python3", ["/usr/bin/python3", "-m", "pytest", "perf_tests/sglang/transport"], False),
    ("python3", ["/usr/bin/python3", "-m", "engine_fixtures.cpu_tier.producer", "--copy", "sglang"], False),
    ("vim", ["vim", "sglang_notes.md"], False),
])
def test_an_sglang_process_is_one_by_title_program_or_module_never_by_a_word(name: str, argv: list[str],
                                                                                 sglang: bool) -> None:
    assert is_sglang(name, argv) is sglang


def test_clean_block_passes() -> None:
    with no_leaks():
        seg = _shm_segment()
        seg.unlink()
        subprocess.run(["true"], check=True, timeout=30)


def test_leaked_shm_segment_is_detected_and_removed() -> None:
    with pytest.raises(LeakError, match=r"(?s)leaked.*/dev/shm/perf_leaktest_.*cleaned up") as info, no_leaks():
        seg = _shm_segment()
    assert seg.name in str(info.value)
    assert not seg.exists()


def test_snapshot_diff_without_reaping() -> None:
    before = LeakSnapshot.take()
    seg = _shm_segment()
    try:
        leaks = before.new_since(LeakSnapshot.take())
        assert seg.name in leaks.shm  # (another suite on the box may have left an owner-less one meanwhile)
        assert (leaks.processes, leaks.cgroups) == ((), ())
        with pytest.raises(LeakError, match=seg.name):
            before.assert_no_new()
    finally:
        seg.unlink()
    before.assert_no_new()


def test_leaked_process_is_detected_and_killed() -> None:
    procs: list[subprocess.Popen[bytes]] = []

    def leaky() -> None:
        with no_leaks():
            procs.append(subprocess.Popen(["sleep", "1000"]))

    with pytest.raises(LeakError, match=r"process \d+: sleep 1000"):
        leaky()
    (proc,) = procs
    assert proc.wait(timeout=10) == -9  # killed by the cleanup, and still reapable by its owner


def test_exception_in_block_wins_and_leak_is_noted_and_cleaned() -> None:
    procs: list[subprocess.Popen[bytes]] = []

    def failing() -> None:
        with no_leaks():
            procs.append(subprocess.Popen(["sleep", "1000"]))
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom") as info:
        failing()
    (proc,) = procs
    assert proc.wait(timeout=10) == -9
    assert any("sleep 1000" in note for note in getattr(info.value, "__notes__", []))


@pytest.mark.cgroup
def test_leaked_cgroup_is_detected_and_removed(cgroup_support: str | None) -> None:
    q = CpuQuota(0.5, name="leaktest")
    procs: list[subprocess.Popen[bytes]] = []

    def leaky() -> None:
        with no_leaks():
            q.__enter__()  # never exited: the cgroup (and the sleep inside) would outlive the test
            procs.append(subprocess.Popen(["sleep", "1000"], preexec_fn=q.preexec_fn()))

    with pytest.raises(LeakError, match=rf"cgroup .*{q.name}"):
        leaky()
    (proc,) = procs
    assert proc.wait(timeout=10) == -9
    assert not any(p.exists() for p in q.paths)
    assert not [p for p in find_cgroups() if q.name in str(p)]


def test_leak_check_fixture_passes_a_clean_test(leak_check: LeakSnapshot) -> None:
    assert isinstance(leak_check, LeakSnapshot)


def test_leak_check_fixture_fails_a_leaky_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import os, uuid
        def test_leaky(leak_check):
            fd = os.open(f"/dev/shm/perf_leaktest_{os.getpid()}_{uuid.uuid4().hex[:8]}", os.O_CREAT | os.O_RDWR,
                         0o600)
            os.close(fd)
        """)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*LeakError*", f"*/dev/shm/perf_leaktest_{os.getpid()}_*"])
    assert not list(SHM_DIR.glob(f"perf_leaktest_{os.getpid()}_*"))  # another suite's copy of this test has its own


FOREIGN_HOLDER = """
import os, sys
name = sys.argv[1]
if os.fork():
    os._exit(0)  # the grandchild is re-parented away: it is not our descendant any more
os.setsid()
fd = os.open('/dev/shm/' + name, os.O_CREAT | os.O_RDWR, 0o600)
print(os.getpid(), flush=True)
sys.stdin.read()  # holds the segment open until the test closes the pipe
"""


def test_segment_held_by_a_foreign_process_is_not_blamed() -> None:
    name = f"perf-leaktest-foreign-{uuid.uuid4().hex[:8]}"
    before = LeakSnapshot.take()
    launcher = subprocess.Popen([sys.executable, "-c", FOREIGN_HOLDER, name], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE)
    holder = int(launcher.stdout.readline()) if launcher.stdout else 0
    try:
        assert launcher.wait(timeout=30) == 0
        assert holder not in {p.pid for p in psutil.Process().children(recursive=True)}
        assert name in os.listdir(SHM_DIR)
        assert name not in before.new_since(LeakSnapshot.take()).shm  # another run's live segment
    finally:
        sigkill_and_wait([holder], 10)
        (SHM_DIR / name).unlink()
        if launcher.stdin:
            launcher.stdin.close()
        if launcher.stdout:
            launcher.stdout.close()


@pytest.mark.cgroup
def test_cgroup_created_elsewhere_is_not_blamed(cgroup_support: str | None) -> None:
    before = LeakSnapshot.take()
    with CpuQuota(None, name="probe") as q:  # only to find the hierarchy; the stray is made by hand
        stray = q.path.parent / f"perf-foreign-{uuid.uuid4().hex[:8]}"
    stray.mkdir()  # as another pytest run on this machine would
    try:
        assert stray in LeakSnapshot.take().cgroups
        assert stray not in before.new_since(LeakSnapshot.take()).cgroups
    finally:
        stray.rmdir()


def test_another_runs_suite_segment_in_flight_is_not_blamed() -> None:
    """Another run's producer made it and nobody holds it yet (in flight to its consumer): seen on this shared
    box, where two worktrees' suites ran the mechanism benchmark at once."""
    out = subprocess.run(["sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True,
                         check=True, timeout=30)
    creator = int(out.stdout)  # alive, re-parented away: not ours
    before = LeakSnapshot.take()
    foreign = SHM_DIR / f"perf_mech_{creator}_{uuid.uuid4().hex[:8]}"
    orphan = SHM_DIR / f"perf_mech_{2**22 + 7}_{uuid.uuid4().hex[:8]}"  # a creator pid that cannot exist
    try:
        foreign.write_bytes(b"x")
        orphan.write_bytes(b"x")
        assert before.new_since(LeakSnapshot.take()).shm == (orphan.name,)
    finally:
        sigkill_and_wait([creator], 10)
        foreign.unlink(missing_ok=True)
        orphan.unlink(missing_ok=True)


NEIGHBOUR = """
import os, sys
from pathlib import Path
from engine_fixtures.isolation import owner, run_registry
owner.claim()
run_registry.register(Path(sys.argv[1]), Path(sys.argv[1]))
print("ready", flush=True)
sys.stdin.read()  # runs until the test closes the pipe
"""


def test_an_ownerless_engine_segment_is_not_blamed_while_another_run_may_own_it(tmp_path: Path) -> None:
    """Another run on the box (setsid --fork: not this run's) is alive: an unheld SGLang-named segment that appeared
    is left alone, not blamed; one this run was seen holding, and a name of the suite's own, still count."""
    from engine_fixtures.isolation import run_registry

    state = run_registry.state_dir(tmp_path / "state")
    before = LeakSnapshot.take()
    neighbour = subprocess.Popen(["setsid", "--fork", sys.executable, "-c", NEIGHBOUR, str(state)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    tag = uuid.uuid4().hex[:8]
    names = [f"sgl_shm_leaktest_{tag}_theirs", f"sgl_shm_leaktest_{tag}_seen", f"perf_leaktest_{os.getpid()}_{tag}"]
    try:
        assert neighbour.stdout is not None
        assert neighbour.stdout.readline() == "ready\n"
        for n in names:
            (SHM_DIR / n).write_bytes(b"x")  # nobody holds any of them
        leaks = before.new_since(LeakSnapshot.take(), seen=frozenset({names[1]}), state=state)
        assert names[0] in leaks.left_alone
        assert names[0] not in leaks.shm
        assert leaks.left_alone_for  # who may own it
        assert names[1] in leaks.shm
        assert names[2] in leaks.shm
    finally:
        assert neighbour.stdin is not None
        assert neighbour.stdout is not None
        neighbour.stdin.close()
        neighbour.stdout.read()
        neighbour.stdout.close()
        neighbour.wait(timeout=30)
        for n in names:
            (SHM_DIR / n).unlink(missing_ok=True)

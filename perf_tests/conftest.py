"""Shared test hygiene for the suite's self-tests."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import pytest

from perf_tests.support import private_shm


@pytest.fixture(autouse=True)
def _isolate_inner_pytest_runs(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs of pytest inside a test (pytester) must not inherit this session's PERF_* settings, e.g. the
    PERF_STRICT that a tox env sets: each self-test states the options it means."""
    if "pytester" in request.fixturenames:
        for name in [k for k in os.environ if k.startswith("PERF_")]:
            monkeypatch.delenv(name)


@pytest.fixture
def no_steal_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stub-engine windows of 0.3-1 s on a shared 2-core VM: a window the hypervisor stole more than 5 % of is
    refused and keeps only its telemetry (``scenarios.refusal``), and on this Firecracker box under load one was (6.1 %,
    2026-12-07; idle, 0 %), so a self-test that reads a window's judged values found them gone. The tests that use
    this read the windows, not the refusal (test_segment_windows tests that, with the threshold as shipped)."""
    from engine_fixtures.scenarios import refusal

    monkeypatch.setattr(refusal, "MAX_STEAL_FRACTION", 1.0)


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Callable[[str, str], Path]]:
    """``mount(name, size)``: a tmpfs of ``size`` (e.g. "8m") at ``tmp_path/name``, for faults like a nearly full
    /dev/shm or a full disk; unmounted at teardown. Needs root: the test skips with that reason otherwise."""
    if os.geteuid() != 0:
        pytest.skip("mounts a small tmpfs: needs root")
    mounted: list[Path] = []

    def mount(name: str, size: str) -> Path:
        where = tmp_path / name
        where.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], check=True, timeout=30)
        mounted.append(where)
        return where

    yield mount
    for where in reversed(mounted):
        subprocess.run(["umount", str(where)], check=True, timeout=30)


# ------------------------------------------------------------------------------------------ two xdist workers
# The unit env runs the self-tests on two pytest-xdist workers (`-n 2 --dist loadgroup`, tox.ini). Most tests are
# pure Python and run beside anything. These modules share something machine-wide and so run one at a time (a group:
# no two of its tests at once, on whichever workers), or with nothing beside them at all (exclusive). By module (path
# under perf_tests/), so a new test in one of them inherits its module's rule; a new module that starts processes
# belongs in one of these lists.
# A group is a lock held from setup to teardown (``pytest_runtest_protocol`` below), not only xdist's loadgroup:
# pytest 9.2 gives a node its id from ``Node._id``, and xdist 3.8's loadgroup still rewrites ``_nodeid``, so its groups
# silently stopped grouping (found 2026-12-04: one module's tests ran on both workers; pytest-dev/pytest-xdist#1386).
# The unit env keeps pytest below 9.2 (constraints/cpu-box.txt), where loadgroup sends a group's tests to one worker
# as one unit: the lock never waits there, and the other worker runs everything else instead of waiting on it. The
# lock stays for an env without that pin.
# One group: every module that starts SGLang-titled stub engines or process trees, directly or in a run of pytest
# inside a test, runs one test at a time. Two such tests used to run side by side, and a factory stopping its
# engine in one took an owner-less or neighbour's /dev/shm pool of the other for its own leak and removed it (CI,
# 2026-12-04: the crash test and the live-neighbour test failed that way).
# A second group: runs of pytest inside a test whose tests measure, but start no engine, process tree or rig (their
# results are made up in the test file): each takes the perf machine lock (one measuring run per machine), so two at
# once would only wait for each other; in sequence they never wait. They count no process and no /dev/shm pool, so
# they run beside the engine trees (until 2026-12-06 they were in that group: the group's one-at-a-time run was
# CI's critical path, 490 s of a 722 s unit run on a loaded 2-core box); where one of them and an engine tree's own
# run of pytest measure at once, one waits for the machine lock, as two suites on one box do.
XDIST_GROUPS: dict[str, tuple[str, ...]] = {
    "machine-lock": (
        "selftests/judge/test_perf_record.py", "selftests/judge/test_unreadable_pool.py",
        "selftests/history/test_history_session.py", "selftests/history/test_secrets.py",
        "selftests/harness/test_preflight.py", "selftests/harness/test_plugin.py",
    ),
    "engine-trees": (
        # SGLang-titled stub engines and process trees started by the test itself: one such tree at a time (their
        # leak checks and fault cycles count processes and /dev/shm pools by owner).

        "selftests/engine/test_engine_runs_stub.py",
        "selftests/engine/test_live_arm_proof.py",
        "selftests/harness/test_soak.py",
        "selftests/harness/test_process.py", "selftests/harness/test_roles.py", "selftests/harness/test_owner.py",
        "selftests/profile/test_profile_cpu_tier.py", "selftests/profile/test_profile_stub_engine.py",
        "selftests/profile/test_profile_tree.py", "selftests/profile/test_profile_units.py",
        "selftests/profile/test_refusal.py",
        # A multiprocessing Pool in the test leaves POSIX semaphores (sem.mp-*), which an engine factory's leak check
        # beside it takes for an SGLang leftover (OWNERLESS_PREFIXES) and removes: the pool's finaliser then failed
        # in sem_unlink (FileNotFoundError, CI 2026-12-06, beside the engine trees on the other worker).
        "sglang/transport/test_shm_lifecycle.py",
    ),
    # Runs of pytest inside a test that measure with stub engines (the machine lock, as above, and engine trees). When
    # each worker has its own /dev/shm (``support.private_shm``: root on Linux), no pool or semaphore of theirs is
    # seen by the other worker's leak checks, so they run beside the engine-trees group, one at a time among
    # themselves (each takes the machine lock); elsewhere they join the engine-trees group (``_group_of``).
    "engine-runs": (
        "selftests/engine/test_engine_scenarios_stub.py", "selftests/engine/test_live_stub.py",
        "selftests/engine/test_group_stub.py",
    ),
}
# Nothing else runs while these do (they join the engine trees' group, so they never wait for one of those
# long runs to end, and run back to back, so the other worker pauses once): the sweep and leak tests
# remove an owner-less SGLang segment only while no other perf run and no SGLang-titled process is alive (else
# they skip, saying so); the real-quota tests need the CPUs a quota grants (a 1.5-core sandbox on 2 cores) or
# read CPU-time ratios (so does test_patches: a spin must burn CPU, read beside a busy neighbour as 0.46x); the
# machine-lock test times two suites taking turns. test_engine_stub kills a stub engine and
# checks that its factory reports the pool it left: a stub engine of a measuring session stopping beside it took
# that owner-less pool as its own leak and removed it first (CI, 2026-12-04), so it runs alone too (19 s).
# test_factory_stub's live-neighbour test found its neighbour's segment gone twice on 2026-12-04 (CI, and a local
# xdist run), each time with engine-tree tests running on the other worker (the broken loadgroup, above), never alone
# (20 runs); it runs alone too (10 s), and its assertion says whether the neighbour still ran and what the check found.
# test_live_arm_stub reads the stub's documented cost of a live arm as a TTFT gap (at least half its 40 ms): beside a
# run of pytest measuring stub engines on the other worker it read 18.6 ms (2026-12-06, three workers), so it runs
# alone too (7 s).
EXCLUSIVE: tuple[str, ...] = (
    "selftests/engine/test_live_arm_stub.py",
    "selftests/harness/test_sweep.py", "selftests/harness/test_leaks.py", "selftests/engine/test_engine_stub.py",
    "selftests/engine/test_factory_stub.py",
    "selftests/engine/test_patches.py",
    "selftests/harness/test_recover_killed_run.py", "selftests/harness/test_machine_lock.py",
    "selftests/harness/test_cgroups.py", "selftests/harness/test_cgroup_v2_ancestor.py",
    "selftests/harness/test_samplers.py", "selftests/harness/test_sampler_overhead.py",
    "sglang/cpu_tier/test_cpu_tier_failures.py",
)
_HERE = Path(__file__).parent
_SHARE_KEY = pytest.StashKey[IO[bytes]]()
_GROUP_KEY = pytest.StashKey[dict[str, IO[bytes]]]()  # each group's lock, by name (EXCLUSIVE is in "engine-trees")
_HELD_KEY = pytest.StashKey[bool]()  # this worker holds the group lock and an exclusive share lock across tests
_OWN_SHM_KEY = pytest.StashKey[bool]()  # this worker runs in its own mount namespace with its own /dev/shm


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "exclusive: under pytest-xdist no other test runs beside this one "
                            "(perf_tests/conftest.py: EXCLUSIVE says which and why).")
    if not config.pluginmanager.hasplugin("xdist"):  # the marks below are set either way; --strict-markers
        config.addinivalue_line("markers", "xdist_group(name): pytest-xdist runs a group's tests on one worker.")
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:  # an xdist worker: the run's lock files, shared by its workers
        config.stash[_SHARE_KEY] = _lock_file(config, workerinput, "")
        config.stash[_GROUP_KEY] = {name: _lock_file(config, workerinput, f"-{name}") for name in XDIST_GROUPS}
        why_not = private_shm.enter()
        config.stash[_OWN_SHM_KEY] = why_not is None
        if why_not is not None:
            sys.stderr.write(f"{workerinput['workerid']}: /dev/shm shared with the other worker ({why_not}): the "
                             "runs of pytest with stub engines join the engine-trees group\n")


def _lock_file(config: pytest.Config, workerinput: dict, suffix: str) -> IO[bytes]:
    """The run's lock file ``perf-selftests-<run>SUFFIX.lock``, open for this worker; closed at its end, and
    removed by gw0."""
    path = Path(tempfile.gettempdir()) / f"perf-selftests-{workerinput['testrunuid']}{suffix}.lock"
    handle = path.open("a+b")
    config.add_cleanup(handle.close)
    if workerinput.get("workerid") == "gw0":
        config.add_cleanup(lambda: path.unlink(missing_ok=True))
    return handle


_GROUP_OF = {path: name for name, paths in XDIST_GROUPS.items() for path in paths} | dict.fromkeys(
    EXCLUSIVE, "engine-trees")


def _group_of(rel: str, own_shm: bool) -> str | None:
    """The group of a module (path under perf_tests/): the engine-runs join the engine trees without a private
    /dev/shm per worker."""
    name = _GROUP_OF.get(rel)
    return "engine-trees" if name == "engine-runs" and not own_shm else name


def pytest_itemcollected(item: pytest.Item) -> None:
    """The marks go on as each test is collected: xdist reads xdist_group in its collection_modifyitems."""
    try:
        rel = item.path.relative_to(_HERE).as_posix()
    except ValueError:
        return
    group = _group_of(rel, item.config.stash.get(_OWN_SHM_KEY, False))
    if group is not None:
        item.add_marker(pytest.mark.xdist_group(group))
    if rel in EXCLUSIVE:
        item.add_marker(pytest.mark.exclusive)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Under xdist, setup to teardown: a test of the group holds the group's lock (one of its tests at a time on all
    workers), then every test a shared lock on the run's lock file and an exclusive test an exclusive one (a flock
    readers-writer lock between the workers). A run of exclusive tests keeps both between its tests; the group's lock
    is always taken first, so two workers never wait on each other in a cycle."""
    share = item.config.stash.get(_SHARE_KEY, None)
    if share is None:
        yield
        return
    mark = item.get_closest_marker("xdist_group")
    group = item.config.stash[_GROUP_KEY][mark.args[0]] if mark is not None else None
    exclusive = item.get_closest_marker("exclusive") is not None
    if not item.config.stash.get(_HELD_KEY, False):
        if group is not None:
            fcntl.flock(group, fcntl.LOCK_EX)
        fcntl.flock(share, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
    try:
        yield
    finally:
        keep = exclusive and nextitem is not None and nextitem.get_closest_marker("exclusive") is not None
        item.config.stash[_HELD_KEY] = keep
        if not keep:
            fcntl.flock(share, fcntl.LOCK_UN)
            if group is not None:
                fcntl.flock(group, fcntl.LOCK_UN)

"""machine_lock.py and the run guard: measuring runs on one machine take turns, say whom they wait for, time out
with the holder's name, and a killed holder never blocks the next run."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from engine_fixtures.errors import MachineBusy
from engine_fixtures.isolation import owner
from engine_fixtures.isolation.machine_lock import Holder, MachineLock
from perf_tests.process_wait import wait_for

pytest_plugins = ("pytester",)

HOLD = """
import sys, threading
from pathlib import Path
from engine_fixtures.isolation import owner
from engine_fixtures.isolation.machine_lock import MachineLock
owner.claim()
lock = MachineLock(Path(sys.argv[1]))
assert lock.acquire(5.0) == "acquired"
print("held", flush=True)
threading.Event().wait(float(sys.argv[2]))  # the holding run's work
"""


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[Callable[[float], subprocess.Popen]]:
    procs: list[subprocess.Popen] = []

    def start(hold_s: float) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path / "lock"), str(hold_s)],
                             stdout=subprocess.PIPE, text=True)
        assert p.stdout is not None
        assert p.stdout.readline().strip() == "held"
        procs.append(p)
        return p

    yield start
    for p in procs:
        p.kill()
        p.wait(timeout=30)
        if p.stdout:
            p.stdout.close()


def test_free_lock_is_taken_and_names_its_holder(tmp_path: Path) -> None:
    lock = MachineLock(tmp_path / "lock")
    assert lock.acquire(1.0) == "acquired"
    try:
        holder = lock.holder()
        assert holder is not None
        assert holder.owner == owner.current()
        child = subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; from "
                                "engine_fixtures.isolation.machine_lock import MachineLock; "
                                "print(MachineLock(Path(sys.argv[1])).acquire(1.0))", str(tmp_path / "lock")],
                               capture_output=True, text=True, check=True, timeout=60)
        assert child.stdout.strip() == "nested"  # a run started by the holder's own tests does not wait for it
    finally:
        lock.release()
    assert lock.holder() is None


def test_busy_lock_times_out_naming_the_holder(tmp_path: Path, holder) -> None:
    other = holder(60.0)
    t0 = time.monotonic()
    with pytest.raises(MachineBusy, match=rf"still held after 0.3 s by run pid {other.pid} .*--perf-lock-timeout"):
        MachineLock(tmp_path / "lock").acquire(0.3)
    assert time.monotonic() - t0 < 2.0


def test_waiter_gets_the_lock_when_the_holder_ends_and_said_whom_it_waited_for(tmp_path: Path, holder) -> None:
    other = holder(1.0)
    told: list[Holder | None] = []
    lock = MachineLock(tmp_path / "lock")
    t0 = time.monotonic()
    assert lock.acquire(60.0, lambda h, _t: told.append(h)) == "acquired"
    waited = time.monotonic() - t0
    lock.release()
    assert [h.pid if h else None for h in told] == [other.pid]
    assert waited < 10.0  # woken by the holder's exit, not by a long poll


def test_sigkilled_holder_releases_at_once(tmp_path: Path, holder) -> None:
    other = holder(600.0)
    other.kill()
    other.wait(timeout=30)
    lock = MachineLock(tmp_path / "lock")
    assert lock.acquire(5.0) == "acquired"
    lock.release()


MEASURED = """
import json, threading, time
from pathlib import Path
import pytest

@pytest.mark.perf
def test_measure():
    t0 = time.time()
    Path({started!r}).write_text("x")
    go = Path({go!r})
    end = time.monotonic() + 120
    while not go.exists() and time.monotonic() < end:
        threading.Event().wait(0.05)
    Path({out!r}).write_text(json.dumps([t0, time.time()]))
"""


def test_two_suites_at_once_serialise_with_a_message_and_a_timeout(pytester: pytest.Pytester, tmp_path: Path) -> None:
    state = tmp_path / "state"

    def suite(name: str, *args: str) -> tuple[subprocess.Popen, Path, Path]:
        d = tmp_path / name
        d.mkdir()
        test = d / f"test_{name}.py"
        test.write_text(MEASURED.format(started=str(d / "started"), go=str(tmp_path / "go"), out=str(d / "out")))
        log = d / "log"
        with open(log, "w") as fh:
            p = pytester.popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", str(test),
                                "--perf-state-dir", str(state), "--perf-results-dir", str(d / "results"), *args],
                               stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        return p, d, log

    a, a_dir, _ = suite("a")
    try:
        wait_for(lambda: (a_dir / "started").exists(), a)
        b, _b_dir, b_log = suite("b", "--perf-lock-timeout", "1")
        assert b.wait(timeout=120) == pytest.ExitCode.USAGE_ERROR
        assert f"still held after 1 s by run pid {a.pid}" in b_log.read_text()
        c, c_dir, c_log = suite("c")
        wait_for(lambda: f"held by run pid {a.pid}" in c_log.read_text(), c)
        assert "perf: waiting up to 1800 s for the machine lock" in c_log.read_text()
        assert not (c_dir / "started").exists()  # C waits before its first test
    finally:
        (tmp_path / "go").write_text("go")
    assert a.wait(timeout=120) == 0
    assert c.wait(timeout=120) == 0, c_log.read_text()
    a_started, a_ended = json.loads((a_dir / "out").read_text())
    c_started, _c_ended = json.loads((c_dir / "out").read_text())
    assert c_started >= a_ended > a_started  # C measured only after A had finished

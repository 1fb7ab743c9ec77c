"""Where py-spy cannot profile, one line says so and the window still runs (no mock: real refusals).

- a pid that does not exist (py-spy exits: it cannot read the process);
- the kernel's own ptrace refusal: py-spy run as an unprivileged user (``setpriv``, through ``$PERF_PY_SPY``)
  against a root-owned process;
- no py-spy binary at all.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from engine_fixtures.profile import record
from engine_fixtures.profile.engine import ProfileSettings, profile_engine

GONE_PID = 2**22 + 17  # above the kernel's pid_max (4194304): never a live process


def _window(calls: list[float]):  # type: ignore[no-untyped-def]
    def drive(seconds: float) -> int:
        calls.append(seconds)
        return 7

    return drive


def test_a_process_that_is_gone_is_one_line_and_the_window_runs(tmp_path: Path) -> None:
    calls: list[float] = []
    out = profile_engine({"scheduler": [GONE_PID]}, _window(calls), ProfileSettings("always", 100.0, 0.5, tmp_path))
    assert calls == [0.5]
    p = out.profiles["scheduler"]
    assert p.samples == 0
    assert p.requests == 7
    assert len(out.notes) == 1
    assert "\n" not in out.notes[0]
    assert f"py-spy could not profile scheduler pid {GONE_PID}" in out.notes[0], out.notes


@pytest.fixture
def unprivileged_py_spy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``$PERF_PY_SPY``: the real py-spy run as nobody (uid 65534), which may not ptrace a root process."""
    setpriv, real = shutil.which("setpriv"), record.py_spy_binary()
    if os.geteuid() != 0 or setpriv is None or real is None:
        pytest.skip("needs root, setpriv and py-spy to run py-spy as an unprivileged user")
    wrapper = tmp_path / "py-spy-as-nobody"
    wrapper.write_text(f'#!/bin/sh\nexec {setpriv} --reuid=65534 --regid=65534 --clear-groups {real} "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv(record.BINARY_ENV, str(wrapper))
    return wrapper


def test_no_ptrace_permission_is_one_line_naming_the_fix(unprivileged_py_spy: Path, tmp_path: Path) -> None:
    target = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        calls: list[float] = []
        out = profile_engine({"scheduler": [target.pid]}, _window(calls),
                             ProfileSettings("always", 100.0, 0.5, tmp_path / "w"))
    finally:
        target.communicate(timeout=30)
    assert calls == [0.5]
    assert out.profiles["scheduler"].samples == 0
    assert len(out.notes) == 1, out.notes
    assert "Permission" in out.notes[0], out.notes
    assert "CAP_SYS_PTRACE" in out.notes[0], out.notes


def test_a_missing_binary_is_one_line_naming_the_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(record.BINARY_ENV, str(tmp_path / "no-such-py-spy"))
    calls: list[float] = []
    out = profile_engine({"scheduler": [os.getpid()], "detokenizer": [os.getpid()]}, _window(calls),
                         ProfileSettings("always", 100.0, 0.5, tmp_path))
    assert calls == []  # no window is spent on a profile that cannot be taken
    assert len(out.notes) == 1, out.notes  # one line for the run, not one per process
    assert "py-spy not found" in out.notes[0]
    assert "pip install" in out.notes[0]
    assert out.profiles["scheduler"].note == out.notes[0]

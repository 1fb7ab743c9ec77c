"""Signals for process trees, shared by the supervisor, the cgroup sandbox and the leak checks.

- ``describe_exit(returncode)``: a ``Popen.returncode`` in words (``killed by signal SIGKILL (9)``).
- ``sigkill_and_wait(pids, timeout_s)``: SIGKILL and wait on pidfds without reaping; returns survivors.
- ``wait_exited(procs, timeout_s)``: wait on pidfds until each ``psutil.Process`` has exited; returns those still
  running. A zombie has exited: only its reaping is left, which is its parent's, or PID 1's for an orphan (on the
  Firecracker VMs of CI about 2 s late), so it is never waited for (``psutil.wait_procs`` waits until the pid is gone:
  every stop of an engine, whose resource tracker outlives its parent, took 1.4-1.9 s longer there).
- ``TerminateAsInterrupt``: this process's SIGTERM raised as ``KeyboardInterrupt``, what SIGINT does, so a
  cancelled job (SIGTERM to pytest) unwinds like Ctrl-C: every ``with`` and ``finally`` runs (engines stopped,
  sandboxes and temp dirs removed, half-written files dropped), then pytest's own interrupt path (fixtures torn
  down, exit status 2). The first SIGTERM raises; later ones while it unwinds are ignored, so they do not cut the
  cleanup short (SIGKILL still ends it). ``install()`` (main thread only, else False) and ``restore()`` (the
  handler before it).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import threading
import time
from collections.abc import Iterable
from typing import Any

import psutil


def describe_exit(returncode: int | None) -> str:
    """``-9`` -> ``killed by signal SIGKILL (9)``; ``3`` -> ``exited with code 3``."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return f"killed by signal {signal.Signals(-returncode).name} ({-returncode})"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with code {returncode}"


def _wait_pidfds(fds: Iterable[int], deadline: float) -> set[int]:
    """Wait until every pidfd in ``fds`` is readable (its process has exited) or ``deadline``; the unready ones."""
    pending = set(fds)
    while pending and (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select(list(pending), [], [], left)
        pending -= set(ready)
    return pending


def sigkill_and_wait(pids: Iterable[int], timeout_s: float) -> tuple[int, ...]:
    """SIGKILL ``pids`` and wait until each has exited; return the ones still running at the timeout.

    Waits on pidfds (readable once a process has exited) and never reaps, so a caller's
    ``Popen.wait()`` still gets the real exit status."""
    deadline = time.monotonic() + timeout_s
    fds: dict[int, int] = {}
    try:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                fds[os.pidfd_open(pid)] = pid
        for fd in fds:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
        return tuple(sorted(fds[fd] for fd in _wait_pidfds(fds, deadline)))
    finally:
        for fd in fds:
            os.close(fd)


def wait_exited(procs: Iterable[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """Wait until each of ``procs`` has exited (a zombie has: module docstring) or ``timeout_s``; return the ones
    still running then. Never reaps. A pid reused by a new process counts as exited (``Process.is_running``)."""
    deadline = time.monotonic() + timeout_s
    fds: dict[int, psutil.Process] = {}
    try:
        for p in procs:
            try:
                fd = os.pidfd_open(p.pid)
            except ProcessLookupError:
                continue
            fds[fd] = p
            if not p.is_running():  # checked after the pidfd is open: it names ``p`` or a process after it
                os.close(fds.pop(fd))
        return [fds[fd] for fd in _wait_pidfds(fds, deadline)]
    finally:
        for fd in fds:
            os.close(fd)


class TerminateAsInterrupt:
    """SIGTERM as ``KeyboardInterrupt`` while installed (see the module docstring)."""

    def __init__(self) -> None:
        self._old: Any = None
        self._installed = False
        self.received = 0

    def _handler(self, signum: int, frame: object) -> None:
        self.received += 1
        if self.received == 1:  # pytest prints the message: "KeyboardInterrupt: SIGTERM: ..."
            raise KeyboardInterrupt("SIGTERM: stopping like Ctrl-C, cleaning up what this run started")

    def install(self) -> bool:
        if self._installed or threading.current_thread() is not threading.main_thread():
            return False
        self._old = signal.signal(signal.SIGTERM, self._handler)
        self._installed = True
        return True

    def restore(self) -> None:
        if self._installed:
            signal.signal(signal.SIGTERM, self._old if self._old is not None else signal.SIG_DFL)
            self._installed = False

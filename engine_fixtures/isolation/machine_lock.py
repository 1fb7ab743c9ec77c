"""One measuring run per machine: a machine-wide lock with a clear wait message and a timeout.

Two perf runs on one box corrupt each other's numbers (they share the CPUs, the GPU and /dev/shm), so a run
that will measure serialises on ``<state dir>/lock`` before its first test. The lock is ``flock``: the kernel
releases it when the holder dies, SIGKILL included, so a killed run never blocks the next one. The holder
writes who it is into the file (pid, start time, its command line with secrets masked: ``redact.command_line``),
so a waiter can say whom it waits for. The file is mode 0666, the one file that needs it: every user's run that
takes the lock writes its own line into it.

Contracts:
- ``MachineLock(path).acquire(timeout_s, on_wait=None)`` returns ``"acquired"`` at once when the lock is free;
  ``"nested"`` when it is held by this process or one of its ancestors (a run started by a test of the run
  that holds it: that outer run owns the machine and chose to start it); else calls ``on_wait(holder)`` once,
  waits (woken by the holder's exit through a pidfd, rechecked every ``recheck_s``), and raises ``MachineBusy``
  naming the holder and the fixes once ``timeout_s`` has passed.
- ``release()`` (idempotent) unlocks; ``holder()`` reads the holder's record (None if unknown).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from engine_fixtures.errors import MachineBusy
from engine_fixtures.isolation import owner
from engine_fixtures.redact import command_line


@dataclass(frozen=True)
class Holder:
    pid: int
    start_cs: int
    command: str

    @property
    def owner(self) -> owner.RunOwner:
        return owner.RunOwner(self.pid, self.start_cs)

    def describe(self) -> str:
        return f"{self.owner.describe()}: {self.command[:160]}"


def _is_self_or_ancestor(pid: int) -> bool:
    if pid == os.getpid():
        return True
    with contextlib.suppress(psutil.Error):
        return pid in {p.pid for p in psutil.Process().parents()}
    return False


class MachineLock:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._fd: int | None = None

    def holder(self) -> Holder | None:
        try:
            data = json.loads(self.path.read_text() or "null")
            return Holder(int(data["pid"]), int(data["start_cs"]), str(data["command"]))
        except (OSError, ValueError, TypeError, KeyError):
            return None

    def _try(self, fd: int) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def _claim(self, fd: int) -> None:
        me = owner.current()
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": me.pid, "start_cs": me.start_cs,
                                  "command": command_line()[:500]}).encode(), 0)

    def acquire(self, timeout_s: float, on_wait=None, recheck_s: float = 0.5) -> str:  # type: ignore[no-untyped-def]
        """Take the lock (see the module docstring); returns ``"acquired"`` or ``"nested"``."""
        if self._fd is not None:
            return "acquired"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        with contextlib.suppress(OSError):
            os.fchmod(fd, 0o666)  # other users' runs must be able to open it too
        deadline = time.monotonic() + timeout_s
        told = False
        try:
            while not self._try(fd):
                holder = self.holder()
                if holder is not None and holder.owner.alive() and _is_self_or_ancestor(holder.pid):
                    os.close(fd)
                    return "nested"
                left = deadline - time.monotonic()
                if left <= 0:
                    who = holder.describe() if holder else "an unknown process (see `fuser -v " + str(self.path) + "`)"
                    raise MachineBusy(
                        f"the perf machine lock {self.path} is still held after {timeout_s:g} s by {who}. Two perf "
                        f"runs on one machine corrupt each other's numbers, so runs that measure take turns: wait "
                        f"for that run to end, stop it (kill {holder.pid if holder else 'PID'}), or raise "
                        f"--perf-lock-timeout")
                if not told and on_wait is not None:
                    on_wait(holder, timeout_s)
                    told = True
                self._wait_for_exit(holder, min(left, recheck_s))
            self._claim(fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.close(fd)
            raise
        self._fd = fd
        return "acquired"

    @staticmethod
    def _wait_for_exit(holder: Holder | None, timeout_s: float) -> None:
        """Block until the holder exits (pidfd readable) or ``timeout_s`` passes."""
        pidfd = None
        with contextlib.suppress(OSError):
            if holder is not None:
                pidfd = os.pidfd_open(holder.pid)
        try:
            select.select([pidfd] if pidfd is not None else [], [], [], timeout_s)
        finally:
            if pidfd is not None:
                os.close(pidfd)

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None

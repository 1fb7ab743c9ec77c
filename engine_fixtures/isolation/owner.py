"""Which run owns a process, a cgroup or a file: the pid and start time of the run's own process.

A run is one pytest session (or one CLI invocation). Everything it leaves on the machine carries its owner token
``<pid>.<start>`` (start: the process's start time in centiseconds since the epoch, exact on Linux), so a later
run can tell the leftovers of a dead run from the live objects of a concurrent one: a pid alone is reused, a
pid with its start time is not (and a reboot changes the start time of every pid).

Where the token goes:
- every supervised process tree gets ``PERF_RUN_OWNER=<token>`` in its environment (inherited by its
  children, also by multiprocessing's spawned ones): ``owner_of_process(pid)`` reads it back;
- cgroup sandboxes are named ``perf-<name>-<token>-<6 hex>`` (``cgroups.CpuQuota``);
- temp files of atomic writes are ``.<name>.<token>.<random>.tmp`` (``temp_prefix``, ``owner_of_temp``;
  ``store.files``);
- the run's temp dirs (sockets, child logs, py-spy recordings) are ``<tmp>/perf-<kind>-<token>-<random>``, mode
  0700 (``temp_dir(kind)``, a ``tempfile.TemporaryDirectory``; ``owner_of_temp_dir``).

Contracts:
- ``current()``: the run this process belongs to: ``PERF_RUN_OWNER`` if set (a child of a run), else the
  process itself. ``claim()`` makes this process a run of its own (a pytest session, also one started by
  another run's test) and exports the token to every child started afterwards.
- ``RunOwner.alive()``: its process still runs (same pid *and* start time, not a zombie).
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import time
from collections.abc import MutableMapping
from dataclasses import dataclass

import psutil

OWNER_ENV = "PERF_RUN_OWNER"
_TOKEN_RE = re.compile(r"(?P<pid>\d+)\.(?P<start>\d+)")
_TEMP_RE = re.compile(r"\..+\.(?P<token>\d+\.\d+)\.[A-Za-z0-9_]+\.tmp")
_KIND_RE = re.compile(r"[a-z]+")
_TEMP_DIR_RE = re.compile(r"perf-[a-z]+-(?P<token>\d+\.\d+)-[A-Za-z0-9_]+")


@dataclass(frozen=True)
class RunOwner:
    """One run: the pid of its process and that process's start time (centiseconds since the epoch)."""

    pid: int
    start_cs: int

    @property
    def token(self) -> str:
        return f"{self.pid}.{self.start_cs}"

    @classmethod
    def parse(cls, token: str) -> RunOwner | None:
        m = _TOKEN_RE.fullmatch(token.strip())
        return cls(int(m["pid"]), int(m["start"])) if m else None

    @classmethod
    def of_pid(cls, pid: int) -> RunOwner | None:
        """The owner token of process ``pid`` as its own run; None if it is gone."""
        try:
            return cls(pid, round(psutil.Process(pid).create_time() * 100))
        except psutil.Error:
            return None

    def alive(self) -> bool:
        try:
            p = psutil.Process(self.pid)
            return round(p.create_time() * 100) == self.start_cs and p.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def started(self) -> str:
        """The start time in UTC, e.g. ``2026-11-30 18:40:01 UTC``."""
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.start_cs / 100))

    def describe(self) -> str:
        return f"run pid {self.pid} (started {self.started()})"


def current() -> RunOwner:
    """The run this process belongs to (``PERF_RUN_OWNER`` if a run started it, else itself)."""
    inherited = RunOwner.parse(os.environ.get(OWNER_ENV, ""))
    if inherited is not None:
        return inherited
    me = RunOwner.of_pid(os.getpid())
    assert me is not None  # this process exists
    return me


def claim(environ: MutableMapping[str, str] | None = None) -> RunOwner:
    """Make this process a run of its own and export its token to the children it starts from now on."""
    me = RunOwner.of_pid(os.getpid())
    assert me is not None
    (os.environ if environ is None else environ)[OWNER_ENV] = me.token
    return me


def owner_of_process(pid: int) -> RunOwner | None:
    """The run recorded in process ``pid``'s environment, or None (no marker, gone, or not readable)."""
    with contextlib.suppress(OSError):
        with open(f"/proc/{pid}/environ", "rb") as fh:
            data = fh.read()
        prefix = OWNER_ENV.encode() + b"="
        for item in data.split(b"\0"):
            if item.startswith(prefix):
                return RunOwner.parse(item[len(prefix):].decode(errors="replace"))
    return None



def temp_prefix(name: str) -> str:
    """Prefix of the temp file an atomic write of ``name`` uses (``.<name>.<token>.``; ``tempfile`` adds the
    random part and ``.tmp``)."""
    return f".{name}.{current().token}."


def owner_of_temp(file_name: str) -> RunOwner | None:
    """The run whose atomic write left the temp file ``file_name``, else None."""
    m = _TEMP_RE.fullmatch(file_name)
    return RunOwner.parse(m["token"]) if m else None


def temp_dir(kind: str) -> tempfile.TemporaryDirectory[str]:
    """A temp dir of this run, ``<tmp>/perf-<kind>-<token>-<random>`` (mode 0700), removed when its ``with`` ends;
    a dead run's is removed by the next run's sweep. ``kind``: lower-case letters (``mech``, ``stream``)."""
    if not _KIND_RE.fullmatch(kind):
        raise ValueError(f"temp dir kind {kind!r}: use lower-case letters only")
    return tempfile.TemporaryDirectory(prefix=f"perf-{kind}-{current().token}-")


def owner_of_temp_dir(name: str) -> RunOwner | None:
    """The run whose temp dir is named ``name``, else None (also for the unowned ``perf-<kind>-<random>`` dirs
    of older versions, which are never touched)."""
    m = _TEMP_DIR_RE.fullmatch(name)
    return RunOwner.parse(m["token"]) if m else None

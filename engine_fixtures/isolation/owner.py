"""Which run owns a process, a cgroup or a file: the pid and start time of the run's own process.

A run is one pytest session (or one CLI invocation). Everything it leaves on the machine carries its owner token
``<pid>.<start>`` (start: the process's start in centiseconds since boot, the kernel's own ``starttime`` in
/proc/PID/stat), so a later run can tell the leftovers of a dead run from the live objects of a concurrent one: a
pid alone is reused, a pid with its start is not. The start is read from the boot clock, never from the wall
clock: psutil's ``create_time()`` adds the boot time that /proc/stat derives from the wall clock, so a clock step
(NTP, a VM restored from a snapshot) moved every live run's start by whole seconds and made it look dead to its
neighbours (their leak checks then took its segments for leftovers). Tokens of older versions (wall-clock
centiseconds since the epoch) are still recognised.

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
- ``RunOwner.alive()``: its process still runs (same pid *and* start, not a zombie).
- ``RunOwner.epoch_s()``: its start as wall-clock seconds since the epoch, for display and for comparing with file
  times (approximate across a clock step).
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
_TICKS = os.sysconf("SC_CLK_TCK")
_EPOCH_CS = 10**11  # above it a start is an older version's wall-clock token (centiseconds since 1970: 1973 on)


def _start_cs(pid: int) -> int:
    """Process ``pid``'s start in centiseconds since boot (/proc/PID/stat field 22); psutil.Error if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()  # the name, in parentheses, may hold spaces
    except FileNotFoundError as exc:
        raise psutil.NoSuchProcess(pid) from exc
    return int(fields[19]) * 100 // _TICKS


@dataclass(frozen=True)
class RunOwner:
    """One run: the pid of its process and that process's start time (centiseconds since the epoch)."""

    pid: int
    start_cs: int  # centiseconds since boot (an older version's token: since the epoch)

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
            return cls(pid, _start_cs(pid))
        except psutil.Error:
            return None

    def alive(self) -> bool:
        try:
            p = psutil.Process(self.pid)
            if self.start_cs >= _EPOCH_CS:  # an older version's token
                same = round(p.create_time() * 100) == self.start_cs
            else:
                same = _start_cs(self.pid) == self.start_cs
            return same and p.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def epoch_s(self) -> float:
        """The start as seconds since the epoch (by today's boot time: approximate across a clock step)."""
        return self.start_cs / 100 if self.start_cs >= _EPOCH_CS else psutil.boot_time() + self.start_cs / 100

    def started(self) -> str:
        """The start time in UTC, e.g. ``2026-11-30 18:40:01 UTC``."""
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.epoch_s()))

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

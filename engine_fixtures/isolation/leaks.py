"""Leak checks: /dev/shm segments, descendant processes and ``perf-*`` cgroups that outlive their owner.

Contracts:
- ``LeakSnapshot.take()`` records the /dev/shm entries, this process's live descendants (pid plus
  create time, so a reused pid is a new process) and every cgroup named ``cgroup_prefix*`` in each
  cpu/cpuacct hierarchy and the v2 tree.
- ``before.new_since(after) -> Leaks``: what exists in ``after`` but not in ``before`` and is ours:
  a new segment counts unless only processes outside this process's tree hold it (open or mapped), or it is
  one of the suite's own ``perf_<kind>_<creator pid>_<8 hex>`` whose creator is alive and not ours (another
  run's segment in flight between its processes);
  a new cgroup counts if this process created it (``CpuQuota``) or one of our processes is in it. So
  another test run on the same machine is neither blamed nor cleaned up.
- ``before.assert_no_new(after=None)`` raises ``LeakError`` listing every leaked item.
- ``no_leaks()`` checks a block; with ``reap=True`` (default) it also removes what leaked (kills the
  processes, unlinks the segments, kills and removes the cgroups) so one leak does not spread to the
  next test. An exception from the block wins; leaks found then are cleaned and noted on it.
- ``mapped_semaphores(pids)`` / ``semaphore_files(inodes)``: the POSIX named semaphores a process tree
  had mapped, so a run can blame the ``/dev/shm/sem.*`` files its own processes left behind.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

from engine_fixtures.errors import LeakError
from engine_fixtures.isolation.cgroup_mounts import CgroupMounts
from engine_fixtures.isolation.cgroups import CREATED_HERE, PREFIX
from engine_fixtures.isolation.signals import sigkill_and_wait

SHM_DIR = Path("/dev/shm")
SUITE_SEGMENT = re.compile(r"perf_[a-z]+_(?P<pid>\d+)_[0-9a-f]{8}")  # transport.shm.new_segment_name and kin


def _descendants() -> frozenset[tuple[int, float]]:
    out = set()
    for p in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            if p.status() != psutil.STATUS_ZOMBIE:
                out.add((p.pid, p.create_time()))
    return frozenset(out)


def shm_holders() -> dict[str, set[int]]:
    """/dev/shm name -> pids that have it open or mapped (from /proc/<pid>/fd and /proc/<pid>/maps)."""
    holders: dict[str, set[int]] = {}
    prefix = str(SHM_DIR) + "/"
    for pid in psutil.pids():
        names: set[str] = set()
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    names.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
        with contextlib.suppress(OSError), open(f"/proc/{pid}/maps") as maps:
            names.update(line.split(None, 5)[-1].strip() for line in maps if prefix in line)
        for name in names:
            if name.startswith(prefix):
                holders.setdefault(name[len(prefix):].removesuffix(" (deleted)"), set()).add(pid)
    return holders


def shm_held_by(pids: set[int] | frozenset[int]) -> frozenset[str]:
    """The /dev/shm names that processes ``pids`` have open or mapped (gone pids skipped): what a tree is seen
    holding while it lives, so a leftover can be told from another run's segment after it died."""
    prefix = str(SHM_DIR) + "/"
    names: set[str] = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    names.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
        with contextlib.suppress(OSError), open(f"/proc/{pid}/maps") as maps:
            names.update(line.split(None, 5)[-1].strip() for line in maps if prefix in line)
    return frozenset(n[len(prefix):].removesuffix(" (deleted)") for n in names if n.startswith(prefix))


def shm_held_by_tree(pid: int) -> frozenset[str]:
    """``shm_held_by`` process ``pid`` and its descendants."""
    pids = {pid}
    with contextlib.suppress(psutil.Error):
        pids.update(c.pid for c in psutil.Process(pid).children(recursive=True))
    return shm_held_by(pids)


def _ours(pids: set[int]) -> set[int]:
    """The subset of ``pids`` that is this process or one of its descendants."""
    me = psutil.Process()
    tree = {me.pid} | {p.pid for p in me.children(recursive=True)}
    return pids & tree


def foreign_suite_segment(name: str) -> bool:
    """True for a ``perf_<kind>_<pid>_<hex>`` segment whose creator is alive and not this process or ours."""
    m = SUITE_SEGMENT.fullmatch(name)
    if m is None:
        return False
    creator = int(m["pid"])
    return psutil.pid_exists(creator) and not _ours({creator})


def find_cgroups(prefix: str = PREFIX, mounts: CgroupMounts | None = None) -> frozenset[Path]:
    """Every cgroup directory named ``prefix*`` under the cpu/cpuacct hierarchies and the v2 tree."""
    mounts = mounts or CgroupMounts.discover()
    found = set()
    for top in mounts.cpu_tops():
        for dirpath, dirnames, _files in os.walk(top):
            found.update(Path(dirpath) / d for d in dirnames if d.startswith(prefix))
    return frozenset(found)


def mapped_semaphores(pids: tuple[int, ...]) -> frozenset[int]:
    """Inodes of the POSIX named semaphores (``/dev/shm/sem.*``) mapped by ``pids`` (gone pids skipped).

    Inodes, not names: glibc's ``sem_open`` maps a temporary ``sem.XXXXXX`` and links it to the final
    name, so /proc/PID/maps shows ``/dev/shm/sem.XXXXXX (deleted)`` for a live ``sem.mp-*``."""
    inodes: set[int] = set()
    for pid in pids:
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        for line in maps.splitlines():
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].startswith("/dev/shm/sem."):
                inodes.add(int(fields[4]))
    return frozenset(inodes)


def semaphore_files(inodes: frozenset[int] | set[int]) -> list[str]:
    """The ``/dev/shm/sem.*`` files that are one of ``inodes``."""
    found = []
    for entry in os.scandir("/dev/shm"):
        if entry.name.startswith("sem.") and entry.inode() in inodes:
            found.append(entry.name)
    return sorted(found)


@dataclass(frozen=True)
class Leaks:
    """Things that appeared between two snapshots."""

    shm: tuple[str, ...] = ()
    processes: tuple[tuple[int, str], ...] = ()  # (pid, command line)
    cgroups: tuple[Path, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.shm or self.processes or self.cgroups)

    def describe(self) -> str:
        lines = [f"  /dev/shm/{name}" for name in self.shm]
        lines += [f"  process {pid}: {cmd}" for pid, cmd in self.processes]
        lines += [f"  cgroup {path}" for path in self.cgroups]
        return "\n".join(lines)

    def raise_if_any(self) -> None:
        """LeakError listing every leaked item, if there is one."""
        if self:
            raise LeakError(_message(self))

    def reap(self, timeout_s: float = 10.0) -> None:
        """Remove what leaked: SIGKILL processes, unlink segments, empty and remove cgroups."""
        sigkill_and_wait([pid for pid, _ in self.processes], timeout_s)
        for name in self.shm:
            with contextlib.suppress(FileNotFoundError):
                (SHM_DIR / name).unlink()
        for path in sorted(self.cgroups, key=lambda p: len(p.parts), reverse=True):  # children first
            procs = path / "cgroup.procs"
            with contextlib.suppress(FileNotFoundError):
                sigkill_and_wait([int(x) for x in procs.read_text().split()], timeout_s)
                path.rmdir()


@dataclass(frozen=True)
class LeakSnapshot:
    """What exists now: /dev/shm names, live descendants, ``perf-*`` cgroups."""

    shm: frozenset[str]
    processes: frozenset[tuple[int, float]]
    cgroups: frozenset[Path]
    cgroup_prefix: str = PREFIX

    @classmethod
    def take(cls, cgroup_prefix: str = PREFIX) -> LeakSnapshot:
        shm = frozenset(os.listdir(SHM_DIR)) if SHM_DIR.is_dir() else frozenset()
        return cls(shm, _descendants(), find_cgroups(cgroup_prefix), cgroup_prefix)

    def new_since(self, after: LeakSnapshot, exclude_pids: frozenset[int] = frozenset(),
                  exclude_shm: frozenset[str] = frozenset()) -> Leaks:
        """What appeared since this snapshot; ``exclude_pids`` are processes that are still rightly alive (another
        live engine of the same run): they, and segments only they hold, are not leaks; ``exclude_shm``: segments
        the caller knows are not this run's (another live run's)."""
        holders = shm_holders() if after.shm - self.shm - exclude_shm else {}
        shm = [n for n in after.shm - self.shm - exclude_shm
               if (SHM_DIR / n).exists() and (not holders.get(n) or _ours(holders[n] - exclude_pids))
               and not foreign_suite_segment(n)]
        cgroups = [p for p in after.cgroups - self.cgroups if p.exists() and _created_by_us(p)]
        procs = []
        for pid, _created in sorted(after.processes - self.processes):
            if pid in exclude_pids:
                continue
            try:
                procs.append((pid, " ".join(psutil.Process(pid).cmdline())[:160]))
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                continue  # exited since: not a leak
            except psutil.AccessDenied:
                procs.append((pid, "?"))
        return Leaks(tuple(sorted(shm)), tuple(procs), tuple(sorted(cgroups)))

    def assert_no_new(self, after: LeakSnapshot | None = None, exclude_pids: frozenset[int] = frozenset(),
                      exclude_shm: frozenset[str] = frozenset()) -> None:
        """LeakError listing everything that appeared since this snapshot (see ``new_since``)."""
        self.new_since(after or LeakSnapshot.take(self.cgroup_prefix), exclude_pids, exclude_shm).raise_if_any()


def _created_by_us(path: Path) -> bool:
    if path.name in CREATED_HERE:
        return True
    with contextlib.suppress(OSError, ValueError):
        return bool(_ours({int(x) for x in (path / "cgroup.procs").read_text().split()}))
    return False


def _message(leaks: Leaks) -> str:
    return (f"leaked after the block ended:\n{leaks.describe()}\nStop processes (Supervised.stop), unlink "
            f"shared memory (SharedMemory.unlink) and leave CpuQuota blocks before returning.")


@contextlib.contextmanager
def no_leaks(cgroup_prefix: str = PREFIX, reap: bool = True) -> Iterator[LeakSnapshot]:
    """Fail with LeakError if the block leaves a /dev/shm segment, a descendant or a ``perf-*`` cgroup."""
    before = LeakSnapshot.take(cgroup_prefix)
    try:
        yield before
    except BaseException as exc:
        leaks = before.new_since(LeakSnapshot.take(cgroup_prefix))
        if leaks:
            if reap:
                leaks.reap()
            if hasattr(exc, "add_note"):
                exc.add_note(_message(leaks) + (" (cleaned up)" if reap else ""))
        raise
    leaks = before.new_since(LeakSnapshot.take(cgroup_prefix))
    if leaks:
        if reap:
            leaks.reap()
        raise LeakError(_message(leaks) + ("\n(They have been cleaned up.)" if reap else ""))

"""Leak checks: /dev/shm segments, descendant processes and ``perf-*`` cgroups that outlive their owner.

Contracts:
- ``LeakSnapshot.take()`` records the /dev/shm entries, this process's live descendants (pid plus
  create time, so a reused pid is a new process) and every cgroup named ``cgroup_prefix*`` in each
  cpu/cpuacct hierarchy and the v2 tree.
- ``before.new_since(after) -> Leaks``: what exists in ``after`` but not in ``before`` and is ours:
  a new segment counts unless only processes outside this process's tree hold it (open or mapped), or it is
  one of the suite's own ``perf_<kind>_<creator pid>_<8 hex>`` whose creator is alive and not ours (another
  run's segment in flight between its processes), or nobody holds it, its name carries no owner (SGLang's
  ``sgl_shm_*``, ...), this run was not seen holding it (``seen``), and another perf run (run registry) or an
  SGLang process outside this tree is alive and may own it (``Leaks.left_alone``);
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
import itertools
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

from engine_fixtures.errors import LeakError
from engine_fixtures.isolation import owner, run_registry
from engine_fixtures.isolation.cgroup_mounts import CgroupMounts
from engine_fixtures.isolation.cgroups import CREATED_HERE, PREFIX
from engine_fixtures.isolation.signals import sigkill_and_wait

SHM_DIR = Path("/dev/shm")
# /dev/shm names SGLang and its libraries give (the engine factory's leftovers it removes and reports).
OWNERLESS_PREFIXES = ("sgl_shm_", "sglang_", "torch_", "cuda.shm.", "sem.loky-", "sem.mp-")
SUITE_SEGMENT = re.compile(r"perf_[a-z]+_(?P<pid>\d+)_[0-9a-f]{8}")  # transport.shm.new_segment_name and kin


def _descendants() -> frozenset[tuple[int, float]]:
    out = set()
    for p in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            if p.status() != psutil.STATUS_ZOMBIE:
                out.add((p.pid, p.create_time()))
    return frozenset(out)


def _shm_names_of(pid: int) -> set[str]:
    """The /dev/shm names process ``pid`` has open or mapped (none if it is gone or unreadable)."""
    prefix = str(SHM_DIR) + "/"
    paths: set[str] = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                paths.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
    with contextlib.suppress(OSError), open(f"/proc/{pid}/maps") as maps:
        paths.update(line.split(None, 5)[-1].strip() for line in maps if prefix in line)
    return {p[len(prefix):].removesuffix(" (deleted)") for p in paths if p.startswith(prefix)}


def shm_holders() -> dict[str, set[int]]:
    """/dev/shm name -> pids that have it open or mapped (from /proc/<pid>/fd and /proc/<pid>/maps)."""
    holders: dict[str, set[int]] = {}
    for pid in psutil.pids():
        for name in _shm_names_of(pid):
            holders.setdefault(name, set()).add(pid)
    return holders


def shm_held_by(pids: set[int] | frozenset[int]) -> frozenset[str]:
    """The /dev/shm names that processes ``pids`` have open or mapped (gone pids skipped): what a tree is seen
    holding while it lives, so a leftover can be told from another run's segment after it died."""
    return frozenset().union(*(_shm_names_of(pid) for pid in pids))


def shm_held_by_tree(pid: int) -> frozenset[str]:
    """``shm_held_by`` process ``pid`` and its descendants."""
    pids = {pid}
    with contextlib.suppress(psutil.Error):
        pids.update(c.pid for c in psutil.Process(pid).children(recursive=True))
    return shm_held_by(pids)


def is_sglang(name: str, argv: list[str]) -> bool:
    """An SGLang process: titled ``sglang::...`` (its scheduler, detokenizer, ... retitle themselves), or the program
    or module sglang (``sglang serve``, ``python -m sglang.launch_server``, ``python .../sglang/launch_server.py``).
    A command line that only mentions the word is not one: ``tox -e unit,sglang-cpu`` (CI's own), ``pip install
    sglang``, the suite's ``pytest ... sglang`` and its children's ``--copy sglang``."""
    head = argv[:2]
    if name.startswith("sglang::") or (argv and argv[0].startswith("sglang::")):
        return True
    if any(os.path.basename(a) == "sglang" for a in head):
        return True
    if any(a.endswith(".py") and "/sglang/" in a for a in head):
        return True
    return any(a == "-m" and nxt.split(".")[0] == "sglang" for a, nxt in itertools.pairwise(argv))


def sglang_alive(skip: set[int]) -> list[str]:
    """SGLang processes (``is_sglang``) alive outside ``skip``."""
    alive = []
    for p in psutil.process_iter(["pid", "name", "cmdline"]):
        if p.pid not in skip and is_sglang(p.info["name"] or "", p.info["cmdline"] or []):
            alive.append(f"SGLang process {p.pid}")
    return alive


def others_who_may_own(state: Path | None) -> list[str]:
    """Who, alive now besides this run, could have made an owner-less engine segment: the perf runs recorded in
    ``state`` other than this one and the runs this process started or was started by (nested runs), and SGLang
    processes outside this process's tree. Empty: only this run can have made it (the leak check's rule)."""
    me = owner.current()
    family = {os.getpid()}
    with contextlib.suppress(psutil.Error):
        this = psutil.Process()
        family.update(p.pid for p in this.parents())
        family.update(p.pid for p in this.children(recursive=True))
    records = run_registry.records(state) if state is not None and (state / "runs").is_dir() else []
    runs = [r.owner.describe() for r in records
            if r.owner != me and r.pid not in family and r.owner.alive()]
    return runs + sglang_alive(family)


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
    # new unheld owner-less segments not counted: another live run may own them (``new_since``); who, for the message
    left_alone: tuple[str, ...] = ()
    left_alone_for: str = ""

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
                  exclude_shm: frozenset[str] = frozenset(), seen: frozenset[str] = frozenset(),
                  state: Path | None = None) -> Leaks:
        """What appeared since this snapshot; ``exclude_pids`` are processes that are still rightly alive (another
        live engine of the same run): they, and segments only they hold, are not leaks; ``exclude_shm``: segments
        the caller knows are not this run's. A new segment nobody holds is a leak if this run's processes were seen
        holding it (``seen``), if its name carries its creator (``perf_<kind>_<pid>_<hex>``, not another live
        run's), or if nobody else alive could have made it (``others_who_may_own(state)``, default state dir when
        None); else (an owner-less name: SGLang's ``sgl_shm_*``, ...) it is another live run's as likely as ours
        (``Leaks.left_alone``), never blamed nor reaped here."""
        holders = shm_holders() if after.shm - self.shm - exclude_shm else {}
        shm, left_alone, who = [], [], None
        for n in sorted(after.shm - self.shm - exclude_shm):
            if not (SHM_DIR / n).exists() or foreign_suite_segment(n):
                continue
            if holders.get(n):
                if _ours(holders[n] - exclude_pids):
                    shm.append(n)
                continue
            if n in seen or SUITE_SEGMENT.fullmatch(n):  # seen held by us; or its name says whose it is
                shm.append(n)
                continue
            if who is None:
                who = others_who_may_own(state if state is not None else run_registry.default_state_dir())
            (left_alone if who else shm).append(n)
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
        return Leaks(tuple(shm), tuple(procs), tuple(sorted(cgroups)), tuple(left_alone), who[0] if who else "")

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

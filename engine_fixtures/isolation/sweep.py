"""Remove what dead runs left on this machine, never what a live run owns, and say so in one line.

A run killed mid-session (the job cancelled: SIGKILL to pytest; the runner rebooted; the OOM killer) leaves its
engine process tree running (re-parented to init), its cgroup sandboxes, /dev/shm segments and half-written
files. At session start ``sweep(...)`` removes, for every run that is dead (``owner.RunOwner.alive()`` is
false) and is not this one:

- processes whose environment carries the dead run's ``PERF_RUN_OWNER`` (the supervisor puts it into every
  tree it starts; children inherit it), and their descendants (a process that sets its title, as SGLang's
  do, hides its environment): SIGKILLed (zombies are already dead);
- cgroup sandboxes ``perf-<name>-<dead token>-<hex>`` in every cpu hierarchy: what is inside is SIGKILLed and
  the directories removed, nested ones first;
- /dev/shm entries that those processes had open or mapped (named semaphores by inode) and that no live
  process holds after the kill; the suite's own ``perf_<kind>_<creator pid>_<8 hex>`` segments whose creator
  is gone and that nobody holds;
- engine segments nobody holds whose names carry no owner (``sgl_shm_*``, ...: SGLang names them), when they
  can only be a dead run's: made after a dead run's recorded start and before this run started, while no
  other perf run and no SGLang process is alive (else they are left, with the dead runs' records for a later
  sweep, and the line says so);
- temp files of atomic writes (``.<name>.<dead token>.<random>.tmp``) in this run's results directory and in
  each dead run's recorded one, and the dead runs' records (``run_registry``);
- the dead runs' temp dirs (``perf-<kind>-<dead token>-<random>``: sockets, child logs, recordings;
  ``owner.temp_dir``) in this run's temp directory and in each dead run's recorded one, after their processes.

Sandboxes and temp dirs of an older version (``perf-<name>-<uuid>``, ``perf-<kind>-<random>``: no owner token)
are never touched. ``SweepReport.line()``
is the one line a session prints ("" when nothing was found).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import psutil

from engine_fixtures.isolation import owner, run_registry
from engine_fixtures.isolation.cgroups import PREFIX, owner_of_sandbox
from engine_fixtures.isolation.leaks import (
    SHM_DIR,
    SUITE_SEGMENT,
    find_cgroups,
    mapped_semaphores,
    semaphore_files,
    sglang_alive,
    shm_held_by,
    shm_holders,
)
from engine_fixtures.isolation.signals import sigkill_and_wait

KILL_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class SweepReport:
    """What the sweep found and removed, for dead runs only."""

    runs: tuple[owner.RunOwner, ...] = ()
    processes: tuple[int, ...] = ()
    cgroups: tuple[str, ...] = ()  # sandbox names (one per sandbox, whatever the number of hierarchies)
    shm: tuple[str, ...] = ()
    temp_dirs: tuple[str, ...] = ()  # the runs' temp dirs
    files: tuple[str, ...] = ()  # half-written files
    survivors: tuple[int, ...] = ()  # processes that outlived SIGKILL (uninterruptible sleep)
    kept: str = ""  # what was left alone, and why

    def __bool__(self) -> bool:
        return bool(self.runs or self.processes or self.cgroups or self.shm or self.temp_dirs or self.files
                    or self.kept)

    def counts(self) -> dict[str, int]:
        return {"processes": len(self.processes), "cgroups": len(self.cgroups), "shm": len(self.shm),
                "temp_dirs": len(self.temp_dirs), "files": len(self.files)}

    def line(self) -> str:
        if not self:
            return ""
        runs = sorted(self.runs, key=lambda r: r.epoch_s())
        who = (f"{len(runs)} dead run{'s' if len(runs) != 1 else ''} ("
               + ", ".join(r.describe() for r in runs[:3]) + (", ..." if len(runs) > 3 else "") + ")")
        parts = [_n(len(self.processes), "process", "processes"), _n(len(self.cgroups), "cgroup sandbox",
                 "cgroup sandboxes"), _n(len(self.shm), "/dev/shm segment", "/dev/shm segments"),
                 _n(len(self.temp_dirs), "temp dir", "temp dirs"),
                 _n(len(self.files), "half-written file", "half-written files")]
        found = ", ".join(p for p in parts if p) or "nothing else"
        text = f"perf sweep: removed what {who} left: {found}" if runs else f"perf sweep: removed {found}"
        if self.survivors:
            text += f"; processes {list(self.survivors)} survived SIGKILL (uninterruptible sleep?)"
        return text + (f"; left alone: {self.kept}" if self.kept else "")


def _n(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}" if count else ""


def _dead(run: owner.RunOwner | None, me: owner.RunOwner) -> bool:
    return run is not None and run != me and not run.alive()


def _dead_processes(me: owner.RunOwner) -> dict[int, owner.RunOwner]:
    """Processes carrying a dead run's marker, and their descendants: a process that sets its title
    (``sglang::scheduler``, via setproctitle) overwrites the environment block /proc shows, marker included."""
    spare = {os.getpid()}
    with contextlib.suppress(psutil.Error):
        spare.update(p.pid for p in psutil.Process().parents())
    found: dict[int, owner.RunOwner] = {}
    for pid in psutil.pids():
        run = owner.owner_of_process(pid)
        if run is None or run == me or pid in spare or not _dead(run, me):
            continue
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            for p in (proc, *proc.children(recursive=True)):
                if p.pid not in spare and p.status() != psutil.STATUS_ZOMBIE:
                    found.setdefault(p.pid, run)
    return found


def _unheld(names: Iterable[str]) -> list[str]:
    names = [n for n in names if (SHM_DIR / n).exists()]
    if not names:
        return []
    holders = shm_holders()
    return [n for n in names if not holders.get(n)]


def _unlink(names: Iterable[str]) -> list[str]:
    removed = []
    for name in sorted(set(names)):
        with contextlib.suppress(FileNotFoundError):
            (SHM_DIR / name).unlink()
            removed.append(name)
    return removed


def _sandboxes(extra_roots: Iterable[Path]) -> set[Path]:
    found = set(find_cgroups(PREFIX))
    for root in extra_roots:
        for dirpath, dirnames, _files in os.walk(root):
            found.update(Path(dirpath) / d for d in dirnames if d.startswith(PREFIX))
    return found


def _rmdir(path: Path, deadline: float) -> str:
    """rmdir a cgroup: "removed", "gone" (another run's sweep removed it first: two runs sweep the same dead run at
    once) or "stuck". EBUSY is retried every 50 ms until ``deadline``: a SIGKILLed task leaves its cgroup only once
    its exit completes. On cgroupfs the control files go with the directory; one that only looks like a cgroup (a
    copy, or a test's fake tree) needs its plain files removed first, which cgroupfs refuses (EPERM) and so never
    harms."""
    while True:
        try:
            path.rmdir()
            return "removed"
        except FileNotFoundError:
            return "gone"
        except OSError as exc:
            if exc.errno == errno.EBUSY and time.monotonic() < deadline:
                threading.Event().wait(0.05)
                continue
        with contextlib.suppress(OSError):
            for f in path.iterdir():
                if f.is_file():
                    f.unlink()
        try:
            path.rmdir()
        except FileNotFoundError:
            return "gone"
        except OSError:
            return "stuck"
        return "removed"


def _remove_cgroups(me: owner.RunOwner, extra_roots: Iterable[Path]) -> tuple[set[str], set[owner.RunOwner],
                                                                               list[int], list[str], set[str]]:
    """Dead runs' sandboxes: what is inside is SIGKILLed (with the /dev/shm names it held, for the caller to unlink
    once nobody holds them: the process step may not have found it, e.g. a concurrent sweep's kill of the tree
    raced this one's scan), then the directories go."""
    held: set[str] = set()
    names: set[str] = set()
    runs: set[owner.RunOwner] = set()
    survivors: list[int] = []
    stuck: list[str] = []
    for path in sorted(_sandboxes(extra_roots), key=lambda p: len(p.parts), reverse=True):  # nested first
        run = owner_of_sandbox(path.name)
        if not _dead(run, me):
            continue
        assert run is not None
        with contextlib.suppress(FileNotFoundError, ValueError):
            inside = tuple(int(x) for x in (path / "cgroup.procs").read_text().split())
            held |= shm_held_by(inside) | set(semaphore_files(mapped_semaphores(inside)))
            survivors += sigkill_and_wait(inside, KILL_TIMEOUT_S)
        outcome = _rmdir(path, time.monotonic() + KILL_TIMEOUT_S)
        if outcome == "removed":
            names.add(path.name)
            runs.add(run)
        elif outcome == "stuck":
            stuck.append(str(path))
    return names, runs, survivors, stuck, held


def _half_written(directories: Iterable[Path], me: owner.RunOwner) -> tuple[list[str], set[owner.RunOwner]]:
    removed, runs = [], set()
    for d in {Path(x) for x in directories}:
        with contextlib.suppress(OSError):
            for entry in os.scandir(d):
                run = owner.owner_of_temp(entry.name)
                if entry.is_file() and _dead(run, me):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(entry.path)
                        removed.append(entry.path)
                        runs.add(run)  # type: ignore[arg-type]
    return removed, runs


def _temp_dirs(directories: Iterable[str], me: owner.RunOwner) -> tuple[list[str], set[owner.RunOwner]]:
    """Dead runs' temp dirs (``owner.temp_dir``) in ``directories``, removed whole."""
    removed, runs = [], set()
    for d in {Path(x) for x in directories if x}:
        with contextlib.suppress(OSError):
            for entry in os.scandir(d):
                run = owner.owner_of_temp_dir(entry.name)
                if not _dead(run, me) or not entry.is_dir(follow_symlinks=False):
                    continue
                shutil.rmtree(entry.path, ignore_errors=True)
                if not os.path.lexists(entry.path):
                    removed.append(entry.path)
                    runs.add(run)  # type: ignore[arg-type]
    return removed, runs


def _engine_segments(prefixes: tuple[str, ...], dead: list[run_registry.RunRecord], me: owner.RunOwner,
                     others_alive: list[str]) -> tuple[list[str], str]:
    """Unheld owner-less engine segments that only a dead run can have made (see the module docstring)."""
    if not prefixes or not dead:
        return [], ""
    with contextlib.suppress(FileNotFoundError):
        candidates = [e for e in os.scandir(SHM_DIR) if e.name.startswith(prefixes)]
        # Process start times are counted from the boot time in whole seconds (up to 1 s early): "before this
        # run started" must hold for the earliest instant it can have started.
        earliest = min(r.owner.epoch_s() for r in dead)
        mine = me.epoch_s()
        within = [e.name for e in candidates if earliest <= e.stat().st_ctime < mine]
        unheld = _unheld(within)
        if unheld and others_alive:
            return [], (f"{len(unheld)} engine /dev/shm segment(s) with no owner in their names, as "
                        f"{others_alive[0]} is alive and may own them")
        return _unlink(unheld), ""
    return [], ""


def _orphaned_suite_segments() -> list[str]:
    found = []
    with contextlib.suppress(FileNotFoundError):
        for name in os.listdir(SHM_DIR):
            m = SUITE_SEGMENT.fullmatch(name)
            if m and not psutil.pid_exists(int(m["pid"])):
                found.append(name)
    return found


def sweep(results_dir: Path | None = None, state: Path | None = None,
          engine_shm_prefixes: tuple[str, ...] = (), cgroup_roots: Iterable[Path] = ()) -> SweepReport:
    """Remove what dead runs left (see the module docstring); returns what was removed. ``cgroup_roots``: cgroup
    directories to search besides the mounted cpu hierarchies (``--perf-cgroup-parent``)."""
    me = owner.current()
    records = run_registry.records(state) if state is not None and (state / "runs").is_dir() else []
    dead_records = [r for r in records if _dead(r.owner, me)]
    others_alive = [r.owner.describe() for r in records if r.owner != me and r.owner.alive()]

    victims = _dead_processes(me)
    runs = set(victims.values())
    held = {name for name, pids in (shm_holders().items() if victims else ()) if pids & set(victims)}
    held |= set(semaphore_files(mapped_semaphores(tuple(victims))))
    survivors = list(sigkill_and_wait(victims, KILL_TIMEOUT_S))
    cgroup_names, cgroup_runs, more, stuck, cgroup_held = _remove_cgroups(me, cgroup_roots)
    held |= cgroup_held
    runs |= cgroup_runs
    survivors += more

    # A live run's producer may have died with its segment in flight: with another run alive, that run sees to it.
    suite = [] if others_alive else _orphaned_suite_segments()
    shm = _unlink(_unheld(held | set(suite)))
    engine, kept = _engine_segments(engine_shm_prefixes, dead_records,
                                    me, others_alive + sglang_alive(set(victims)))
    shm += engine

    dirs = [r.results_dir for r in dead_records] + ([str(results_dir)] if results_dir is not None else [])
    files, file_runs = _half_written(dirs, me)
    runs |= file_runs
    temp_dirs, temp_runs = _temp_dirs([r.tmp_dir for r in dead_records] + [tempfile.gettempdir()], me)
    runs |= temp_runs
    if state is not None:
        for tmp, run in run_registry.record_temps(state):
            if _dead(run, me):
                with contextlib.suppress(FileNotFoundError):
                    tmp.unlink()
    for record in dead_records if not kept else ():  # kept: the records let a later sweep try again
        run_registry.unregister(Path(record.path))
        runs.add(record.owner)
    if stuck:
        kept = "; ".join(filter(None, [kept, f"cgroups that would not go: {', '.join(stuck[:3])}"]))
    return SweepReport(tuple(sorted(runs, key=lambda r: r.epoch_s())), tuple(sorted(victims)),
                       tuple(sorted(cgroup_names)), tuple(sorted(shm)), tuple(sorted(temp_dirs)), tuple(sorted(files)),
                       tuple(sorted(set(survivors))), kept)

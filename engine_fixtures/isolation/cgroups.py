"""Real cgroup CPU quota sandbox (cgroup v2 ``cpu.max`` or v1 ``cpu.cfs_quota_us``).

Contracts:
- ``effective_cpu_quota(pid)``: cores the cgroup hierarchy allows ``pid`` (min over the process's
  cgroup and all its ancestors, in every hierarchy that has a cpu controller); ``None`` if unlimited.
- ``probe_quota_support()``: ``None`` if a child cgroup with a quota can be created here, else a
  reason stating the fact and the fix.
- ``CpuQuota(cores)``: a ``perf-<name>-<owner token>-<hex>`` child cgroup with that quota (``None`` = no
  limit, still accounted); ``owner_of_sandbox(name)`` reads the owning run back. Leaving the ``with`` block
  SIGKILLs whatever is still inside and removes the cgroup, also after an exception. Backends: ``V2Backend``
  and ``V1Backend`` (one interface).
- Placement: under ``root`` if given, else under ``configure_parent(path)``'s path (``--perf-cgroup-parent``),
  else v2 inside this process's own cgroup (``cgroup_v2.plan``: never above it), else v1 next to it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

import psutil

from engine_fixtures.errors import ConfigError, LeakError, MeasurementError, QuotaNotPermitted
from engine_fixtures.isolation import cgroup_v2, owner
from engine_fixtures.isolation.cgroup_mounts import CgroupMounts, cgroup_dir_problem, cgroup_paths_of
from engine_fixtures.isolation.cgroup_values import (
    PERIOD_US,
    CpuStat,
    _quota_us,
    _read_kv,
    format_cpu_max,
    parse_cpu_max,
)
from engine_fixtures.isolation.signals import sigkill_and_wait
from engine_fixtures.quota import checked_cores

PREFIX = "perf-"
_SANDBOX_RE = re.compile(rf"{PREFIX}(?:.+-)?(?P<token>\d+\.\d+)-[0-9a-f]{{6}}")
PARENT_FIX = "pass a cgroup directory (e.g. --perf-cgroup-parent /sys/fs/cgroup/<path>) or drop the option"
NO_QUOTA_FIX = "or pass `--perf-cpu-quota none` to run without quotas (quota arms are then skipped)"
CREATED_HERE: set[str] = set()  # names of the cgroups this process created, so leak checks blame only us


def _limit_at(directory: Path, version: int) -> float | None:
    if version == 2:
        f = directory / "cpu.max"
        return parse_cpu_max(f.read_text()) if f.exists() else None
    quota_f, period_f = directory / "cpu.cfs_quota_us", directory / "cpu.cfs_period_us"
    if not quota_f.exists():
        return None
    quota = int(quota_f.read_text())
    return None if quota < 0 else quota / int(period_f.read_text())


def quota_along(leaf: Path, top: Path, version: int) -> float | None:
    """Min quota (cores) from ``leaf`` up to and including ``top``; None if none of them limits."""
    chain = [leaf, *(d for d in leaf.parents if d == top or top in d.parents)] if top != leaf else [leaf]
    limits = [q for d in chain if (q := _limit_at(d, version)) is not None]
    return min(limits) if limits else None


def effective_cpu_quota(pid: int | None = None, mounts: CgroupMounts | None = None) -> float | None:
    """Cores the cgroup hierarchy allows process ``pid`` (default: this one); None if unlimited."""
    mounts = mounts or CgroupMounts.discover()
    limits = [q for leaf, top, version in cgroup_paths_of(pid or os.getpid(), mounts, "cpu")
              if (q := quota_along(leaf, top, version)) is not None]
    return min(limits) if limits else None


def owner_of_sandbox(name: str) -> owner.RunOwner | None:
    """The run that made the sandbox named ``name`` (``perf-<name>-<pid>.<start>-<hex>``); None for other names
    (an older version's ``perf-<name>-<uuid>``, or not a sandbox)."""
    m = _SANDBOX_RE.fullmatch(name)
    return owner.RunOwner.parse(m["token"]) if m else None


RMDIR_TIMEOUT_S = 15.0


def _rmdir(path: Path, last_try: bool) -> bool:
    """True when ``path`` is gone; False on EBUSY (unless ``last_try``: then the OSError)."""
    try:
        path.rmdir()
    except FileNotFoundError:
        pass
    except OSError as exc:
        if exc.errno != errno.EBUSY or last_try:
            raise
        return False
    return True


class Backend:
    """One cgroup version: create/limit/add/list/stat/remove one child cgroup."""

    version: int
    paths: tuple[Path, ...]  # every directory this cgroup occupies (v1: cpu and cpuacct hierarchies)

    def create(self, cores: float | None) -> None:
        raise NotImplementedError

    def limit(self, cores: float | None) -> None:
        """Set (or lift, None) the quota of the existing cgroup; the kernel applies it to live processes."""
        raise NotImplementedError

    def stat(self) -> CpuStat:
        raise NotImplementedError

    def procs_files(self) -> tuple[Path, ...]:
        return tuple(p / "cgroup.procs" for p in self.paths)

    def pids(self) -> tuple[int, ...]:
        return tuple(sorted({int(x) for f in self.procs_files() if f.exists() for x in f.read_text().split()}))

    def remove(self, timeout_s: float = RMDIR_TIMEOUT_S) -> None:
        """rmdir every directory, retried every 50 ms on EBUSY until ``timeout_s``: a killed process the kernel
        still counts until its parent reaps it (on the H200 an A/B pair's engine children, re-parented to a PID 1
        that reaps slowly, failed the rmdir)."""
        deadline = time.monotonic() + timeout_s
        for p in reversed(self.paths):
            while not _rmdir(p, time.monotonic() > deadline):
                threading.Event().wait(0.05)


class V2Backend(Backend):
    """cgroup v2: ``cpu.max``; the parent's ``cgroup.subtree_control`` must include ``cpu``."""

    version = 2

    def __init__(self, parent: Path, name: str) -> None:
        self.parent = parent
        self.paths = (parent / name,)

    def _enable_cpu(self) -> None:
        control = self.parent / "cgroup.subtree_control"
        if "cpu" in control.read_text().split():
            return
        available = (self.parent / "cgroup.controllers").read_text().split()
        if "cpu" not in available:
            raise QuotaNotPermitted(
                f"cgroup v2 at {self.parent} has no cpu controller (it offers {' '.join(available)!r}); "
                f"delegate it from the parent (echo +cpu > <parent>/cgroup.subtree_control), {NO_QUOTA_FIX}")
        try:
            control.write_text("+cpu")
        except OSError as exc:
            busy = "" if exc.errno != errno.EBUSY else " (v2 forbids it while processes sit in that cgroup: " \
                "run the suite from a leaf below it)"
            raise QuotaNotPermitted(
                f"cannot enable the cpu controller in {control} ({exc.strerror}){busy}; "
                f"run as root or delegate the subtree (e.g. systemd-run --user -p Delegate=yes), "
                f"{NO_QUOTA_FIX}") from None

    def create(self, cores: float | None) -> None:
        self._enable_cpu()
        self.paths[0].mkdir()
        self.limit(cores)

    def limit(self, cores: float | None) -> None:
        (self.paths[0] / "cpu.max").write_text(format_cpu_max(cores))

    def stat(self) -> CpuStat:
        kv = _read_kv(self.paths[0] / "cpu.stat")
        return CpuStat(kv.get("usage_usec", 0) / 1e6, kv.get("nr_periods", 0), kv.get("nr_throttled", 0),
                       kv.get("throttled_usec", 0) / 1e6)


class V1Backend(Backend):
    """cgroup v1: quota in the ``cpu`` hierarchy, usage from ``cpuacct.usage`` (co-mounted or separate)."""

    version = 1

    def __init__(self, cpu_parent: Path, acct_parent: Path | None, name: str) -> None:
        cpu = cpu_parent / name
        self.acct = (acct_parent / name) if acct_parent is not None else None
        self.paths = (cpu,) if self.acct is None or self.acct == cpu else (cpu, self.acct)

    def create(self, cores: float | None) -> None:
        for p in self.paths:
            p.mkdir()
        (self.paths[0] / "cpu.cfs_period_us").write_text(str(PERIOD_US))
        self.limit(cores)

    def limit(self, cores: float | None) -> None:
        (self.paths[0] / "cpu.cfs_quota_us").write_text("-1" if cores is None else str(_quota_us(cores, PERIOD_US)))

    def stat(self) -> CpuStat:
        kv = _read_kv(self.paths[0] / "cpu.stat")
        if self.acct is None:
            raise MeasurementError(f"no cpuacct hierarchy matches {self.paths[0]}: CPU usage cannot be "
                                   f"measured; mount the v1 cpuacct controller (or use cgroup v2)")
        usage_ns = int((self.acct / "cpuacct.usage").read_text())
        return CpuStat(usage_ns / 1e9, kv.get("nr_periods", 0), kv.get("nr_throttled", 0),
                       kv.get("throttled_time", 0) / 1e9)


def _v1_acct(cpu_dir: Path, mounts: CgroupMounts) -> Path | None:
    """The cpuacct directory matching a v1 cpu directory (itself when co-mounted "cpu,cpuacct")."""
    if (cpu_dir / "cpuacct.usage").exists():
        return cpu_dir
    cpu_m, acct_m = mounts.v1("cpu"), mounts.v1("cpuacct")
    if cpu_m is None or acct_m is None or cpu_m.mountpoint not in (cpu_dir, *cpu_dir.parents):
        return None
    acct = acct_m.mountpoint / cpu_dir.relative_to(cpu_m.mountpoint)
    return acct if acct.is_dir() else None


def configure_parent(path: Path | None) -> None:
    """Where every ``CpuQuota`` of this process is created unless it names a ``root``: ``None`` (default) lets
    each sandbox find its place next to this process's own cgroup; a path (``--perf-cgroup-parent``) puts
    them all under that cgroup directory, as the operator accepted."""
    global _PARENT
    _PARENT = path


def configured_parent() -> Path | None:
    return _PARENT


_PARENT: Path | None = None


def _backend_for(root: Path | None, name: str) -> Backend:
    """A backend under ``root`` (a cgroup directory: v2 if it has cgroup.controllers, else v1), or next
    to this process's own cgroup in the real hierarchy (v2 if it can have cpu there, else v1)."""
    mounts = CgroupMounts.discover()
    root = root if root is not None else _PARENT
    if root is not None:
        if (why := cgroup_dir_problem(root)) is not None:
            raise ConfigError(f"cgroup parent {why}; {PARENT_FIX}")
        if (root / "cgroup.controllers").exists():
            return V2Backend(root, name)
        return V1Backend(root, _v1_acct(root, mounts), name)
    own = {(version, ctrl): (leaf, top) for ctrl in ("cpu", "cpuacct")
           for leaf, top, version in cgroup_paths_of(os.getpid(), mounts, ctrl)}
    refusal: QuotaNotPermitted | None = None
    if (2, "cpu") in own:
        try:
            return V2Backend(cgroup_v2.apply(cgroup_v2.plan(*own[(2, "cpu")])).parent, name)
        except QuotaNotPermitted as exc:
            refusal = exc
    if (1, "cpu") in own:
        return V1Backend(own[(1, "cpu")][0], _v1_acct(own[(1, "cpu")][0], mounts), name)
    if refusal is not None:
        raise refusal
    raise QuotaNotPermitted(
        f"no usable cgroup CPU controller (no cgroup v2 mount; no v1 cpu hierarchy); run the suite in a cgroup "
        f"whose parent delegates cpu (e.g. systemd-run --scope -p Delegate=yes), {NO_QUOTA_FIX}")


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class CpuQuota:
    """A ``perf-<name>-<owner token>-<6 hex>`` child cgroup with a CPU quota of ``cores`` (None: unlimited,
    accounted); the owner token is this run's (``owner.current()``), so a later run can tell a dead run's
    leftover from a live run's sandbox."""

    def __init__(self, cores: float | None, *, name: str = "perf", root: Path | None = None,
                 kill_timeout_s: float = 10.0) -> None:
        self.cores = checked_cores(cores, "CpuQuota cores")
        base = name.removeprefix("perf").strip("-")
        self.owner = owner.current()
        self.name = f"{PREFIX}{base + '-' if base else ''}{self.owner.token}-{uuid.uuid4().hex[:6]}"
        self.kill_timeout_s = kill_timeout_s
        self._backend = _backend_for(root, self.name)
        self._created = False

    @property
    def version(self) -> int:
        return self._backend.version

    @property
    def path(self) -> Path:
        """The directory holding the quota (v1: in the cpu hierarchy)."""
        return self._backend.paths[0]

    @property
    def paths(self) -> tuple[Path, ...]:
        return self._backend.paths

    def __enter__(self) -> CpuQuota:
        try:
            self._backend.create(self.cores)
        except OSError as exc:
            self._remove_quietly()
            if exc.errno == errno.EINVAL:
                parent = _limit_at(self.path.parent, self.version)
                raise ConfigError(f"the kernel rejected {self.cores} cores in {self.path} (EINVAL): the "
                                  f"parent allows {parent} cores and cgroup v1 forbids a child quota above "
                                  f"its parent's; lower the quota") from None
            if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOENT):
                raise QuotaNotPermitted(
                    f"cannot create cgroup {self.path} with a quota ({exc.strerror}); run as root, or on "
                    f"cgroup v2 delegate the subtree to this user (cgroup.subtree_control needs +cpu), "
                    f"{NO_QUOTA_FIX}") from None
            raise
        self._created = True
        CREATED_HERE.add(self.name)
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """SIGKILL everything still inside, wait for it, remove the cgroup. Idempotent."""
        if not self._created:
            return
        self.kill_all(self.kill_timeout_s)
        self._backend.remove()
        self._created = False

    def _remove_quietly(self) -> None:
        with contextlib.suppress(OSError):
            self._backend.remove()

    def kill_all(self, timeout_s: float) -> None:
        """SIGKILL every process in the cgroup until it is empty (never reaps: ``Popen.wait()`` keeps the
        real status); LeakError if one survives ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while pids := tuple(p for p in self._backend.pids() if _running(p)):  # a listed pid may be gone already
            survivors = sigkill_and_wait(pids, max(0.0, deadline - time.monotonic()))
            if survivors or time.monotonic() > deadline:
                raise LeakError(f"processes {list(survivors or pids)} survived SIGKILL in cgroup {self.path} for "
                                f"{timeout_s} s (uninterruptible sleep?); see ps -o pid,stat,wchan -p ...")

    def set_cores(self, cores: float | None) -> None:
        """Change the quota of the live sandbox (None: unlimited); its processes stay where they are."""
        cores = checked_cores(cores, "CpuQuota cores")
        if not self._created:
            raise ConfigError(f"cgroup {self.path} is not created; enter the CpuQuota before setting its quota")
        try:
            self._backend.limit(cores)
        except OSError as exc:
            if exc.errno == errno.EINVAL:
                raise ConfigError(f"the kernel rejected {cores} cores in {self.path} (EINVAL): above the parent's "
                                  "quota? lower the quota") from None
            raise
        self.cores = cores

    def add_pid(self, pid: int) -> None:
        """Move process ``pid`` (all its threads) into this cgroup."""
        for f in self._backend.procs_files():
            f.write_text(str(pid))

    def preexec_fn(self) -> Callable[[], None]:
        """For ``Popen(preexec_fn=...)``: the child joins before exec, so its whole tree starts inside."""
        files = [str(f) for f in self._backend.procs_files()]

        def join() -> None:
            for f in files:
                with open(f, "w") as fh:
                    fh.write(str(os.getpid()))

        return join

    def pids(self) -> tuple[int, ...]:
        return self._backend.pids()

    def stat(self) -> CpuStat:
        """Cumulative usage and throttling since creation."""
        return self._backend.stat()


def probe_quota_support(root: Path | None = None) -> str | None:
    """None if a child cgroup with a quota can be created here; else the fact and the fix."""
    try:
        with CpuQuota(0.5, name="probe", root=root):
            pass
    except QuotaNotPermitted as exc:
        return str(exc)
    return None


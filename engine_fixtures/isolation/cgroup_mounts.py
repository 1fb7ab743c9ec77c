"""Which cgroup hierarchies are mounted here and where a process sits in them (v1 and v2).

``CgroupMounts.discover()`` reads ``/proc/self/mountinfo``; ``cgroup_paths_of(pid, mounts, controller)``
maps ``/proc/<pid>/cgroup`` onto those mounts, honouring a mount root that is not ``/`` (cgroup
namespaces, bind mounts). ``cgroup_dir_problem(path)``: why ``path`` is no cgroup directory a sandbox can be made in
(``--perf-cgroup-parent``, checked at start and again where a sandbox is placed).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Mount:
    """One mounted cgroup hierarchy: v1 with its controllers, or the v2 unified tree."""

    mountpoint: Path
    root: str  # the mount's root inside the hierarchy (not "/" under a cgroup namespace or bind mount)
    version: int
    controllers: frozenset[str]  # v1 only; v2 controllers are per directory (cgroup.controllers)


@dataclass(frozen=True)
class CgroupMounts:
    """The cgroup hierarchies mounted here, from ``/proc/self/mountinfo``."""

    mounts: tuple[Mount, ...]

    @classmethod
    def discover(cls, mountinfo: Path = Path("/proc/self/mountinfo")) -> CgroupMounts:
        found: list[Mount] = []
        for line in mountinfo.read_text().splitlines():
            left, _, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            if len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
                continue
            version = 2 if tail[0] == "cgroup2" else 1
            ctrls = frozenset(tail[2].split(",")) if version == 1 else frozenset()
            found.append(Mount(Path(fields[4]), fields[3], version, ctrls))
        return cls(tuple(found))

    @property
    def v2(self) -> Mount | None:
        return next((m for m in self.mounts if m.version == 2), None)

    def v1(self, controller: str) -> Mount | None:
        return next((m for m in self.mounts if m.version == 1 and controller in m.controllers), None)

    def cpu_tops(self) -> tuple[Path, ...]:
        """Mountpoints of the v1 cpu/cpuacct hierarchies and of the v2 tree."""
        tops = [m.mountpoint for m in self.mounts if m.version == 2 or m.controllers & {"cpu", "cpuacct"}]
        return tuple(dict.fromkeys(tops))


def cgroup_paths_of(pid: int, mounts: CgroupMounts, controller: str) -> list[tuple[Path, Path, int]]:
    """(leaf directory, mountpoint, version) of ``pid``'s cgroup in each hierarchy holding ``controller``
    (v2 is included for ``cpu``: cpu.max may sit on any ancestor)."""
    out: list[tuple[Path, Path, int]] = []
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        hid, _, rest = line.partition(":")
        ctrls, _, path = rest.partition(":")
        mount = mounts.v2 if hid == "0" and ctrls == "" else None
        if mount is None and controller in ctrls.split(","):
            mount = mounts.v1(controller)
        if mount is None or (mount.version == 2 and controller != "cpu"):
            continue
        rel = os.path.relpath(path, mount.root)
        if rel.startswith(".."):
            continue  # this cgroup lies outside what the mount shows
        out.append((mount.mountpoint if rel == "." else mount.mountpoint / rel, mount.mountpoint, mount.version))
    return out


def cgroup_dir_problem(path: Path) -> str | None:
    """Why ``path`` is not a cgroup directory a sandbox can be made in (None: it is one): missing, not a directory,
    or a plain directory (neither v2's ``cgroup.controllers`` nor v1's ``cpu.cfs_quota_us`` in it), where a sandbox
    would be an ordinary directory holding quota files no kernel reads, which nothing could remove."""
    if not path.exists():
        return f"{path} does not exist"
    if not path.is_dir():
        return f"{path} is not a directory"
    if (path / "cgroup.controllers").exists() or (path / "cpu.cfs_quota_us").exists():
        return None
    tops = ", ".join(str(top) for top in CgroupMounts.discover().cpu_tops()) or "nowhere here"
    return (f"{path} is not a cgroup directory (it holds neither cgroup.controllers (v2) nor cpu.cfs_quota_us (v1 "
            f"cpu)); the cgroup file systems with a cpu controller are mounted at {tops}")

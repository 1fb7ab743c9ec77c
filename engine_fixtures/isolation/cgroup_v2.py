"""Where a cgroup v2 sandbox may live: inside this process's own cgroup, never above it unless told so.

A sandbox above our own cgroup (a sibling, or the root) escapes what the container or job runner set on our
cgroup: its memory limit, and its kill (a runner that stops a job by killing the job's cgroup would leave the
engine running). So, with ``leaf`` our cgroup and ``top`` the hierarchy's mountpoint:

1. ``explicit`` (``--perf-cgroup-parent PATH``): PATH, as the operator accepted it.
2. ``leaf == top``: we sit in the (namespace's) root, which may hold processes and children: the root.
3. ``leaf`` already hands ``cpu`` down (in its ``cgroup.subtree_control``): ``leaf``.
4. ``leaf`` is the ``perf.runner`` leaf this suite made in an earlier session and its parent hands ``cpu``
   down: that parent (the sandboxes are siblings of the runner leaf, inside our cgroup).
5. ``leaf`` has the ``cpu`` controller (in ``cgroup.controllers``) but holds processes, and v2 lets a cgroup
   hand a controller down only when its processes live in leaves below it ("no internal processes"). If every
   process in ``leaf`` is this process, one of its ancestors (tox, the shell, the runner) or one of its
   descendants, they move into ``leaf/perf.runner`` and ``leaf`` then enables ``+cpu`` (systemd's delegation
   protocol); everything stays inside ``leaf``. A foreign process in ``leaf`` makes it a refusal instead.
6. Otherwise ``QuotaNotPermitted`` naming the nearest ancestor that does hand ``cpu`` down and the fixes:
   delegate ``cpu`` to our cgroup, or accept that ancestor with ``--perf-cgroup-parent``, or run without quotas.

``plan(leaf, top, explicit)`` decides without writing (a ``V2Plan``); ``apply(plan)`` performs step 5's move.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

import psutil

from engine_fixtures.errors import QuotaNotPermitted

RUNNER_LEAF = "perf.runner"  # not "perf-": the leak checks and the sweep must never take it for a sandbox
NO_QUOTA = "or pass `--perf-cpu-quota none` to run without quotas (quota arms are then skipped)"


@dataclass(frozen=True)
class V2Plan:
    """Where sandboxes go (``parent``), and the processes to move into ``parent/perf.runner`` first (step 5)."""

    parent: Path
    move: tuple[int, ...] = ()
    reason: str = ""  # which rule chose ``parent``


def lists_cpu(f: Path) -> bool:
    try:
        return "cpu" in f.read_text().split()
    except OSError:
        return False


def procs_of(cgroup: Path) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in (cgroup / "cgroup.procs").read_text().split())
    except (OSError, ValueError):
        return ()


def _own_lineage(me: int) -> set[int]:
    """This process, its ancestors and its descendants."""
    pids = {me}
    with contextlib.suppress(psutil.Error):
        proc = psutil.Process(me)
        pids.update(p.pid for p in proc.parents())
        pids.update(p.pid for p in proc.children(recursive=True))
    return pids


def nearest_delegating_ancestor(leaf: Path, top: Path) -> Path | None:
    """The nearest ancestor of ``leaf`` (up to ``top``) whose ``cgroup.subtree_control`` lists cpu."""
    for ancestor in leaf.parents:
        if top not in (ancestor, *ancestor.parents):
            return None
        if lists_cpu(ancestor / "cgroup.subtree_control"):
            return ancestor
    return None


def plan(leaf: Path, top: Path, explicit: Path | None = None, me: int | None = None) -> V2Plan:
    """Where the sandboxes of a process in ``leaf`` go (see the module docstring); writes nothing."""
    if explicit is not None:
        return V2Plan(explicit, reason=f"--perf-cgroup-parent {explicit}")
    if leaf == top:
        if lists_cpu(leaf / "cgroup.controllers"):
            return V2Plan(leaf, reason="this process sits in the hierarchy's root")
        raise QuotaNotPermitted(f"cgroup v2 root {leaf} offers no cpu controller; {NO_QUOTA}")
    if lists_cpu(leaf / "cgroup.subtree_control"):
        return V2Plan(leaf, reason="this process's cgroup hands cpu down")
    if leaf.name == RUNNER_LEAF and lists_cpu(leaf.parent / "cgroup.subtree_control"):
        return V2Plan(leaf.parent, reason=f"next to the {RUNNER_LEAF} leaf made by an earlier session")
    outside = nearest_delegating_ancestor(leaf, top)
    accept = (f"accept sandboxes under {outside} (outside this cgroup: they escape its limits and its kill) "
              f"with --perf-cgroup-parent {outside}, " if outside is not None else "")
    if lists_cpu(leaf / "cgroup.controllers"):
        procs = procs_of(leaf)
        foreign = sorted(set(procs) - _own_lineage(os.getpid() if me is None else me))
        if not foreign:
            return V2Plan(leaf, move=procs, reason=f"delegated inside {leaf} (its processes move to {RUNNER_LEAF})")
        raise QuotaNotPermitted(
            f"cgroup v2: this process's cgroup {leaf} has the cpu controller but also holds processes that are not "
            f"this run's ({foreign[:5]}), and v2 hands a controller down only from a cgroup whose processes live in "
            f"leaves below it; move them first (mkdir {leaf}/{RUNNER_LEAF}; for p in $(cat {leaf}/cgroup.procs); "
            f"do echo $p > {leaf}/{RUNNER_LEAF}/cgroup.procs; done), or {accept}{NO_QUOTA}")
    raise QuotaNotPermitted(
        f"cgroup v2: this process's cgroup {leaf} has no cpu controller ({leaf.parent}/cgroup.subtree_control "
        f"lacks cpu), so a sandbox with a CPU quota cannot be made inside it; delegate cpu to it (echo +cpu > "
        f"{leaf.parent}/cgroup.subtree_control, for each ancestor that lacks it), or {accept}{NO_QUOTA}")


def apply(p: V2Plan) -> V2Plan:
    """Perform the plan's move (step 5): every process of ``p.parent`` into ``p.parent/perf.runner``."""
    if not p.move:
        return p
    runner = p.parent / RUNNER_LEAF
    try:
        runner.mkdir(exist_ok=True)
        for pid in p.move:
            with contextlib.suppress(ProcessLookupError):  # exited meanwhile
                (runner / "cgroup.procs").write_text(str(pid))
    except OSError as exc:
        raise QuotaNotPermitted(f"cannot move the processes of {p.parent} into {runner} ({exc.strerror}), which "
                                f"cgroup v2 needs before {p.parent} may hand cpu down; run as root or delegate "
                                f"{p.parent} to this user, {NO_QUOTA}") from None
    return p

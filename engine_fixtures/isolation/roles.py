"""Map a process tree to roles by title (SGLang's ``setproctitle`` titles by default).

Contracts:
- Matching uses the full command line (``/proc/<pid>/cmdline``, which ``setproctitle`` rewrites), never
  ``name()``, which the kernel truncates to 15 characters (``sglang::schedul``).
- Roles are tried in order; the first match wins. ``discover`` returns every role name of ``roles``
  (empty tuple if none matched) plus ``other`` for unmatched processes; pids are sorted.
- ``wait_for_roles`` returns once each required role has its count, raises ``ProcessStartError`` at
  the deadline listing what was found, and at once if the root exits (waits on a pidfd, never reaps).
"""

from __future__ import annotations

import contextlib
import os
import select
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import psutil

from engine_fixtures.errors import ProcessCrashed, ProcessStartError

OTHER = "other"


@dataclass(frozen=True)
class Role:
    """A role: ``matcher(cmdline, is_root)`` says whether a process plays it."""

    name: str
    matcher: Callable[[str, bool], bool]


def title_prefix(name: str, prefix: str) -> Role:
    """A role for processes whose (set) title starts with ``prefix``."""
    return Role(name, lambda cmdline, _is_root: cmdline.startswith(prefix))


SGLANG_ROLES: tuple[Role, ...] = (
    Role("http_server", lambda _cmdline, is_root: is_root),  # untitled root: HTTP server + TokenizerManager
    title_prefix("scheduler", "sglang::scheduler"),
    title_prefix("detokenizer_router", "sglang::detokenizer_router"),
    title_prefix("detokenizer", "sglang::detokenizer"),
    title_prefix("tokenizer_worker", "sglang::tokenizer_worker"),
    title_prefix("data_parallel_controller", "sglang::data_parallel_controller"),
    Role("resource_tracker", lambda cmdline, _is_root: "multiprocessing.resource_tracker" in cmdline),
)


def _cmdline(p: psutil.Process) -> str | None:
    try:
        return " ".join(p.cmdline()).strip()
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return None


def classify(cmdline: str, is_root: bool, roles: Iterable[Role] = SGLANG_ROLES) -> str:
    """The first role whose matcher accepts this process, else ``other``."""
    return next((r.name for r in roles if r.matcher(cmdline, is_root)), OTHER)


def discover(root_pid: int, roles: Iterable[Role] = SGLANG_ROLES) -> Mapping[str, tuple[int, ...]]:
    """Role name -> pids of ``root_pid`` and its descendants (processes that vanished are skipped)."""
    roles = tuple(roles)
    found: dict[str, list[int]] = {r.name: [] for r in roles}
    found.setdefault(OTHER, [])
    try:
        root = psutil.Process(root_pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        procs = []
    for p in procs:
        cmdline = _cmdline(p)
        if cmdline is not None:
            found[classify(cmdline, p.pid == root_pid, roles)].append(p.pid)
    return {name: tuple(sorted(pids)) for name, pids in found.items()}


def describe_tree(root_pid: int) -> str:
    """One ``pid cmdline`` line per process of the tree, for error messages."""
    try:
        root = psutil.Process(root_pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return f"(pid {root_pid} is gone)"
    return "\n".join(f"  {p.pid} {(_cmdline(p) or '?')[:120]}" for p in procs)


def wait_for_roles(root_pid: int, required: Mapping[str, int] | Iterable[str], deadline_s: float, *,
                   roles: Iterable[Role] = SGLANG_ROLES, alive: Callable[[], object] | None = None,
                   interval_s: float = 0.25) -> Mapping[str, tuple[int, ...]]:
    """Poll ``discover`` until every required role has at least its count (names alone mean 1).

    ``alive`` is called every poll (e.g. ``Supervised.ensure_alive``, which raises on a crash); if it
    returns ``False`` this raises ProcessCrashed."""
    need = dict(required) if isinstance(required, Mapping) else dict.fromkeys(required, 1)
    roles = tuple(roles)
    unknown = set(need) - {r.name for r in roles} - {OTHER}
    if unknown:
        raise ValueError(f"required roles {sorted(unknown)} are not among {[r.name for r in roles]}")
    end = time.monotonic() + deadline_s
    try:
        pidfd: int | None = os.pidfd_open(root_pid)
    except ProcessLookupError:
        pidfd = None
    try:
        while True:
            if alive is not None and alive() is False:
                raise ProcessCrashed(f"process {root_pid} died while waiting for roles {need}")
            found = discover(root_pid, roles)
            missing = {r: n for r, n in need.items() if len(found.get(r, ())) < n}
            if not missing:
                return found
            left = end - time.monotonic()
            exited = pidfd is None or bool(select.select([pidfd], [], [], 0)[0])
            if exited or left <= 0:
                why = "exited" if exited else f"did not show them within {deadline_s:.1f} s"
                counts = {r: len(p) for r, p in found.items() if p}
                raise ProcessStartError(
                    f"process tree {root_pid} {why}: missing roles {missing} (found {counts}).\n"
                    f"Its processes:\n{describe_tree(root_pid)}\nIf the titles differ (another SGLang "
                    f"version?), adjust the Role matchers; if it was only slow, raise the deadline.")
            select.select([pidfd], [], [], min(interval_s, left))  # wakes early if the root exits
    finally:
        if pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(pidfd)

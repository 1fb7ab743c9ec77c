"""Disjoint CPU sets for the engines and the load client (``--perf-engine-cpus``, ``--perf-client-cpus``).

The engine's whole process tree is started with the engine set as its affinity (``LaunchSpec.cpus``; every
child inherits it), the load client with the client set, so the client's event loop never competes with the
engine's processes for a CPU, and an engine's tokenizer, scheduler and detokenizer always see the same CPUs
from one start to the next. Affinity is used rather than a cgroup ``cpuset``: it needs no cpuset controller
delegated (many runners' cgroup v2 leaves have only ``memory``), and it works under cgroup v1 and v2 alike; the
CPU quota stays in the cgroup sandbox. SGLang sets affinity itself only with NUMA binding on multi-node hosts or
``SGLANG_SET_CPU_AFFINITY=1`` (see ../shared reference notes); the engine's proof records the affinity it ran on.

The visible CPU count matters to regression 1: PyTorch's intra-op pool has one thread per CPU the process may
run on, so an engine pinned to 12 of 16 CPUs runs 12 copy threads under its quota (still above the 4-core quota
that reproduces the seed's fan-out).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from engine_fixtures.errors import ConfigError

AUTO_MIN_CPUS = 8


@dataclass(frozen=True)
class CpuSplit:
    engine: tuple[int, ...] | None  # None: not pinned
    client: tuple[int, ...] | None

    def describe(self) -> str:
        def show(cpus: tuple[int, ...] | None) -> str:
            return "any CPU" if cpus is None else f"CPUs {_ranges(cpus)}"

        return f"engines on {show(self.engine)}, load client on {show(self.client)}"


def _ranges(cpus: Sequence[int]) -> str:
    out, start, prev = [], None, None
    for c in sorted(cpus):
        if start is None:
            start = prev = c
        elif c == prev + 1:
            prev = c
        else:
            out.append(f"{start}-{prev}" if prev != start else f"{start}")
            start = prev = c
    if start is not None:
        out.append(f"{start}-{prev}" if prev != start else f"{start}")
    return ",".join(out)


def cpu_split(setting: tuple[int, ...] | str, client: tuple[int, ...] | None,
              visible: Sequence[int] | None = None) -> CpuSplit:
    """The split for ``--perf-engine-cpus`` = ``setting`` ('auto', 'off' or CPUs) and ``--perf-client-cpus``."""
    seen = tuple(sorted(os.sched_getaffinity(0) if visible is None else visible))
    if client is not None and not set(client) <= set(seen):
        raise ConfigError(f"--perf-client-cpus {_ranges(client)} are not all visible to this process ({_ranges(seen)})")
    if setting == "off":
        return CpuSplit(None, client)
    if setting == "auto":
        if len(seen) < AUTO_MIN_CPUS:
            return CpuSplit(None, client)
        client = client or seen[-max(2, len(seen) // 4):]
        engine = tuple(c for c in seen if c not in client)
        if not engine:
            raise ConfigError(f"--perf-client-cpus {_ranges(client)} leaves no CPU for the engines; name fewer")
        return CpuSplit(engine, client)
    if not isinstance(setting, tuple) or not setting:
        raise ConfigError(f"--perf-engine-cpus {setting!r}: use auto, off or a CPU list such as 0-11")
    engine = tuple(sorted(set(setting)))
    if not set(engine) <= set(seen):
        raise ConfigError(f"--perf-engine-cpus {_ranges(engine)} are not all visible to this process ({_ranges(seen)})")
    rest = tuple(c for c in seen if c not in engine)
    client = client if client is not None else (rest or None)
    if client is not None and set(client) & set(engine):
        raise ConfigError(f"--perf-engine-cpus {_ranges(engine)} and --perf-client-cpus {_ranges(client)} overlap; "
                          "give the load client CPUs of its own")
    return CpuSplit(engine, client)


# ------------------------------------------------------------------------------------------------ per-role pinning
# The engine's CPU-heavy roles each get whole physical cores of the engine's set, no core shared by two roles (SMT
# siblings kept apart): the scheduler, which drives the GPU, and the HTTP server with its tokenizer manager, which
# preprocesses every image; the detokenizer one core. The other processes share what is left. Applied after the
# engine is ready, to every thread of each role's processes (threads started later inherit it), so one start
# sees the same CPUs as the next: the lever against two fresh engines of one build differing (issue 36). It is not
# the default: pinning the HTTP server to two cores bounds the spinning copy threads of regression 1 by those cores
# rather than by the quota, so a quota scenario keeps the engine's whole set.
ROLE_CORES: tuple[tuple[str, int], ...] = (("scheduler", 2), ("http_server", 2), ("detokenizer", 1))


def physical_cores(cpus: Sequence[int], topology: Path = Path("/sys/devices/system/cpu")) -> list[tuple[int, ...]]:
    """``cpus`` grouped by physical core (package and core id, from sysfs), cores in order of their first CPU.
    A CPU whose topology is unreadable is a core of its own."""
    cores: dict[tuple[str, str] | int, list[int]] = {}
    for cpu in sorted(cpus):
        base = topology / f"cpu{cpu}" / "topology"
        try:
            key: tuple[str, str] | int = ((base / "physical_package_id").read_text().strip(),
                                          (base / "core_id").read_text().strip())
        except OSError:
            key = cpu
        cores.setdefault(key, []).append(cpu)
    return [tuple(c) for c in cores.values()]


@dataclass(frozen=True)
class RolePlacement:
    """Role name -> the CPUs its processes run on; ``rest`` for the processes of no listed role."""

    roles: tuple[tuple[str, tuple[int, ...]], ...]
    rest: tuple[int, ...]

    def cpus_of(self, role: str) -> tuple[int, ...]:
        return dict(self.roles).get(role, self.rest)

    def describe(self) -> str:
        return "; ".join(f"{r} on CPUs {_ranges(c)}" for r, c in (*self.roles, ("others", self.rest)))


def role_placement(engine: Sequence[int], wanted: Sequence[tuple[str, int]] = ROLE_CORES,
                   topology: Path = Path("/sys/devices/system/cpu")) -> RolePlacement:
    """Whole physical cores of ``engine`` for each role of ``wanted`` (role, cores), in order; the rest for the
    other processes. ConfigError when the set has too few cores for every role and one core for the rest."""
    cores = physical_cores(engine, topology)
    need = sum(n for _r, n in wanted) + 1
    if len(cores) < need:
        raise ConfigError(f"per-role pinning needs {need} physical cores in the engine's CPUs ({_ranges(engine)} "
                          f"hold {len(cores)}): give the engines more CPUs (--perf-engine-cpus) or turn it off "
                          "(--perf-role-cpus off)")
    roles, i = [], 0
    for role, n in wanted:
        roles.append((role, tuple(c for core in cores[i:i + n] for c in core)))
        i += n
    return RolePlacement(tuple(roles), tuple(c for core in cores[i:] for c in core))


def pin_roles(pids: Mapping[str, Sequence[int]], placement: RolePlacement) -> dict[str, tuple[int, ...]]:
    """Set every thread of every process of each role in ``pids`` to its CPUs; returns role -> CPUs for the roles
    that had processes. A process or thread that exits meanwhile is skipped."""
    done: dict[str, tuple[int, ...]] = {}
    for role, members in pids.items():
        cpus = placement.cpus_of(role)
        for pid in members:
            try:
                tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
            except FileNotFoundError:
                continue
            for tid in tids:
                with contextlib.suppress(ProcessLookupError):
                    os.sched_setaffinity(tid, cpus)
            done[role] = cpus
    return done


# ------------------------------------------------------------------------------------------------ the stage
# Engines alive together (an A/B's instance group) are served one at a time, but every one of them is running: an
# SGLang scheduler busy-polls about one core whether or not it has work (H200 2026-11-30), so three idle engines
# spin three cores in the measured engine's CPU set, wherever the kernel put them, and which engine shares its CPUs
# with which spinner is a property of the engine's start, kept for its life: a candidate source of the offset
# between two engines of one build (issue 52). The stage removes it by construction: the engine being measured is
# moved onto the stage (every thread of its tree; per-role pinning inside it where asked), every other member onto
# the wings, a core or two of the engines' set that no measured engine ever runs on. Every engine is then measured
# on the same CPUs with the same neighbours, whatever its start. Measured on one H100 host (2026-12-07, three null
# A/Bs): the TPOT offset was 0.0-1.2 % sd with it off and 1.6 % with it on (2 df each), so it is not shown to help
# and stays opt-in (``--perf-ab-stage on``) until a host with a large offset is measured both ways.
WING_CORES = 2  # idle members only spin: two physical cores hold any number of them


@dataclass(frozen=True)
class Stage:
    """The CPUs the measured member of a group runs on, and the wings the idle members are parked on."""

    stage: tuple[int, ...]
    wings: tuple[int, ...]
    roles: RolePlacement | None = None  # per-role pinning inside the stage (``--perf-role-cpus on``)

    def placement(self, measured: bool) -> RolePlacement:
        """Where a member's processes go: per role on the stage (or its whole tree there), else on the wings."""
        if not measured:
            return RolePlacement((), self.wings)
        return self.roles if self.roles is not None else RolePlacement((), self.stage)

    def describe(self) -> str:
        on = self.roles.describe() if self.roles is not None else f"CPUs {_ranges(self.stage)}"
        return f"the measured engine on {on}; the idle ones parked on CPUs {_ranges(self.wings)}"


def stage_split(engine: Sequence[int], *, roles: bool = False,
                topology: Path = Path("/sys/devices/system/cpu")) -> Stage:
    """The last ``WING_CORES`` physical cores of ``engine`` as the wings, the rest the stage (with per-role pinning
    inside it if ``roles``). ConfigError where the set has too few cores to leave a stage of at least 4."""
    cores = physical_cores(engine, topology)
    if len(cores) < WING_CORES + 4:
        raise ConfigError(f"the stage needs {WING_CORES + 4} physical cores in the engines' CPUs ({_ranges(engine)} "
                          f"hold {len(cores)}): give the engines more CPUs (--perf-engine-cpus) or turn it off "
                          "(--perf-ab-stage off)")
    stage = tuple(c for core in cores[:-WING_CORES] for c in core)
    wings = tuple(c for core in cores[-WING_CORES:] for c in core)
    return Stage(stage, wings, role_placement(stage, topology=topology) if roles else None)

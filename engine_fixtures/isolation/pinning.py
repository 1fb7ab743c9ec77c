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

import os
from collections.abc import Sequence
from dataclasses import dataclass

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

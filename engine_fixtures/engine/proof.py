"""Read the plugin's per-process proof files and judge whether the requested arm is what ran.

A proof is only evidence if the load really crossed the transport, so ``arm_problems`` insists on
positive counts: zero SHM copies on the cpu transport, or zero rebuilds on cuda_ipc, is a failure
(the arm was never exercised), never a pass.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine_fixtures.engine.spec import EngineSpec
from engine_fixtures.errors import ConfigError, MeasurementError
from engine_fixtures.sglang_plugin.proof_file import FLUSH_REQUEST

CACHED_OPENS_PER_REBUILD_MAX = 0.5  # cache on: the seed saw 0 opens per image (1 in the server's life)
UNCACHED_OPENS_PER_REBUILD_MIN = 1.0  # cache off: one _new_shared_cuda per rebuild, exactly


@dataclass(frozen=True)
class ProcessProof:
    pid: int
    role: str
    title: str
    sglang_version: str | None
    requested: Mapping[str, str]
    installed: Mapping[str, str]
    counters: Mapping[str, float]
    errors: tuple[str, ...]
    flush_seq: int
    patch_ms_now: Mapping[str, float] = field(default_factory=dict)

    def count(self, name: str) -> float:
        return float(self.counters.get(name, 0.0))


@dataclass(frozen=True)
class ArmProof:
    """All processes' proofs at one moment."""

    processes: tuple[ProcessProof, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)

    def by_role(self, role: str) -> tuple[ProcessProof, ...]:
        return tuple(p for p in self.processes if p.role == role)

    def total(self, name: str, role: str | None = None) -> float:
        return sum(p.count(name) for p in self.processes if role is None or p.role == role)

    def summary(self) -> dict[str, float]:
        """Flat numbers for a RunResult's metadata."""
        names = sorted({n for p in self.processes for n in p.counters})
        out = {n: self.total(n) for n in names}
        rebuilds = out.get("ipc_rebuilds", 0.0)
        if rebuilds:
            out["ipc_opens_per_rebuild"] = out.get("ipc_opens", 0.0) / rebuilds
            out["ipc_rebuild_ms_per_rebuild"] = 1000.0 * out.get("ipc_rebuild_s", 0.0) / rebuilds
        return out


def read_proofs(directory: Path) -> ArmProof:
    """Parse every ``proof-*.json``; a half-written file cannot exist (the writer renames atomically)."""
    procs = []
    for path in sorted(Path(directory).glob("proof-*.json")):
        try:
            d = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise MeasurementError(f"unreadable arm proof {path}: {exc}") from None
        procs.append(
            ProcessProof(
                int(d["pid"]),
                d["role"],
                d["title"],
                d.get("sglang_version"),
                d.get("requested", {}),
                d.get("installed", {}),
                d.get("counters", {}),
                tuple(d.get("errors", ())),
                int(d.get("flush_seq", 0)),
                d.get("patch_ms_now", {}),
            )
        )
    return ArmProof(tuple(procs))


def request_flush(directory: Path, live_pids: set[int], deadline_s: float = 10.0) -> ArmProof:
    """Ask every live engine process to rewrite its proof now, and wait (bounded) until they all did."""
    directory = Path(directory)
    seq = time.monotonic_ns()
    (directory / (FLUSH_REQUEST + ".tmp")).write_text(str(seq))
    (directory / (FLUSH_REQUEST + ".tmp")).replace(directory / FLUSH_REQUEST)
    waiter = threading.Event()
    end = time.monotonic() + deadline_s
    while True:
        proof = read_proofs(directory)
        fresh = {p.pid for p in proof.processes if p.flush_seq >= seq}
        if live_pids <= fresh or time.monotonic() >= end:
            missing = sorted(live_pids - fresh)
            return ArmProof(proof.processes, {"flush_missing_pids": missing})
        waiter.wait(0.05)


def arm_problems(spec: EngineSpec, proof: ArmProof) -> list[str]:
    """Every way in which the proof contradicts the requested arm (empty list: the arm really ran)."""
    problems: list[str] = []
    if not proof.processes:
        return [
            "no arm proof was written: the SGLang plugin did not load in any engine process. Fix: "
            "`pip install -e .` in the engine's environment, or run `python -m "
            "engine_fixtures.sglang_plugin.distinfo DIR` and put DIR and the repo root on PYTHONPATH"
        ]
    for p in proof.processes:
        problems += [f"{p.role} pid {p.pid}: {e}" for e in p.errors]
    mains = proof.by_role("http_server") + proof.by_role("tokenizer_worker")
    if not mains:
        problems.append("no proof from the HTTP/tokenizer process (the one that runs wrap_shm_features)")
    if spec.mm_feature_transport == "cpu" and spec.copy == "stock":
        if not sum(proof.total(f"shm_copies_{impl}") for impl in ("torch", "buffer", "unknown")):
            problems.append("copy=stock requested but zero SHM copies were recorded: the load never crossed the "
                            "SHM transport (check /dev/shm size and the log for 'Failed to allocate shared memory')")
    elif spec.mm_feature_transport == "cpu":
        want, other = spec.copy, "buffer" if spec.copy == "torch" else "torch"
        done = proof.total(f"shm_copies_{want}")
        wrong = proof.total(f"shm_copies_{other}") + proof.total("shm_copies_unknown")
        if wrong:
            problems.append(
                f"copy={want} requested but {wrong:g} SHM copies ran another implementation "
                f"({other}/unknown); installed: {[p.installed.get('copy') for p in mains]}"
            )
        if not done:
            problems.append(
                f"copy={want} requested but zero {want} SHM copies were recorded: the load never "
                "crossed the SHM transport (check /dev/shm size and the log for 'Failed to "
                "allocate shared memory')"
            )
    else:
        env_want = {"on": "1", "off": "0"}.get(spec.ipc_cache)
        for p in mains if env_want is not None else ():
            seen = p.installed.get("ipc_pool_handle_cache_env")
            if seen != env_want:
                problems.append(f"SGLANG_USE_IPC_POOL_HANDLE_CACHE={seen} in pid {p.pid}, expected {env_want}")
        rebuilds = proof.total("ipc_rebuilds", "scheduler")
        opens = proof.total("ipc_opens", "scheduler")
        if not rebuilds:
            problems.append(
                "cuda_ipc requested but schedulers rebuilt zero IPC features: the load never "
                "crossed the CUDA IPC transport (check the log for 'MmItemMemoryPool has no free chunk')"
            )
        elif spec.ipc_cache == "on" and opens / rebuilds > CACHED_OPENS_PER_REBUILD_MAX:
            problems.append(
                f"ipc_cache=on requested but {opens:g} IPC opens for {rebuilds:g} rebuilds "
                f"(> {CACHED_OPENS_PER_REBUILD_MAX} per rebuild): the pool-handle cache did not work"
            )
        elif spec.ipc_cache == "off" and opens / rebuilds < UNCACHED_OPENS_PER_REBUILD_MIN:
            problems.append(
                f"ipc_cache=off requested but only {opens:g} IPC opens for {rebuilds:g} rebuilds: "
                "handles were cached anyway"
            )
    return problems


def assert_arm(spec: EngineSpec, proof: ArmProof) -> None:
    """Raise ConfigError listing every contradiction between the requested arm and what ran."""
    problems = arm_problems(spec, proof)
    if problems:
        raise ConfigError(f"arm {spec.arm} did not run as requested: " + "; ".join(problems))

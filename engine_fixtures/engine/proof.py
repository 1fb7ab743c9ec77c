"""Read the plugin's per-process proof files and judge whether the requested arm is what ran.

- ``live_arm_problems(spec, arm, before, after)``: every way in which the counters between two proofs of one engine
  contradict the live arm ``arm`` (``transport.live.LiveArm``): a process not on the arm's seq or not on the arm, an
  error of the plugin, copies of another implementation or under another seq, zero copies on the cpu transport,
  copies at another thread count than the cap (or than the launch count when there is none), IPC proxies that
  carried the other cache value, opens per rebuild that contradict on/off, zero rebuilds on cuda_ipc, a patch at
  other milliseconds or never called. A window whose proofs disagree is an error, never a measurement.
- ``arm_problems(spec, proof)``: the same rules for the launch arm (``launch_arm_of(spec)``, seq 0) over the
  engine's whole life (``live_arm_problems`` from an empty proof).
- ``switch_problems(arm, seq, proof)``: why a switch did not take (``EngineHandle.set_arm``): a live process that did
  not answer the flush, reports another seq or arm, or could not apply it; a patch no process carries.
A proof is only evidence if the load really crossed the transport, so the rules insist on positive counts: zero SHM
copies on the cpu transport, or zero rebuilds on cuda_ipc, is a failure (the arm was never exercised), never a pass.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from engine_fixtures.engine.spec import EngineSpec
from engine_fixtures.errors import ConfigError, MeasurementError
from engine_fixtures.sglang_plugin.arm_state import launch_arm
from engine_fixtures.sglang_plugin.instrument import RUNNING_BATCH
from engine_fixtures.sglang_plugin.proof_file import FLUSH_REQUEST
from engine_fixtures.transport.live import LiveArm

CACHED_OPENS_PER_REBUILD_MAX = 0.5  # cache on: the seed saw 0 opens per image (1 in the server's life)
UNCACHED_OPENS_PER_REBUILD_MIN = 1.0  # cache off: one _new_shared_cuda per rebuild, exactly
NO_PROOF = ("no arm proof was written: the SGLang plugin did not load in any engine process. Fix: "
            "`pip install -e .` in the engine's environment, or run `python -m "
            "engine_fixtures.sglang_plugin.distinfo DIR` and put DIR and the repo root on PYTHONPATH")
NO_SHM = ("the load never crossed the SHM transport (check /dev/shm size and the log for 'Failed to allocate "
          "shared memory')")
NO_IPC = ("the load never crossed the CUDA IPC transport (check the log for 'MmItemMemoryPool has no free "
          "chunk')")


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
    arm_seq: int | None = None  # the live arm this process applied (None: a plugin without live arms)
    arm_now: Mapping[str, Any] | None = None  # its LiveArm.to_dict()
    arm_errors: tuple[str, ...] = ()  # what this process could not do for that arm

    def count(self, name: str) -> float:
        return float(self.counters.get(name, 0.0))

    @property
    def who(self) -> str:
        return f"{self.role} pid {self.pid}"

    @property
    def arm_label(self) -> str:
        """The applied arm as ``LiveArm.label`` (or the raw report if it is not a valid arm)."""
        if self.arm_now is None:
            return "no live arm"
        try:
            return LiveArm.from_dict(self.arm_now).label
        except (TypeError, ValueError):
            return repr(dict(self.arm_now))


@dataclass(frozen=True)
class ArmProof:
    """All processes' proofs at one moment."""

    processes: tuple[ProcessProof, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)

    def by_role(self, role: str) -> tuple[ProcessProof, ...]:
        return tuple(p for p in self.processes if p.role == role)

    def total(self, name: str, role: str | None = None) -> float:
        return sum(p.count(name) for p in self.processes if role is None or p.role == role)

    def process(self, pid: int) -> ProcessProof | None:
        return next((p for p in self.processes if p.pid == pid), None)

    def names(self, prefix: str = "") -> set[str]:
        return {n for p in self.processes for n in p.counters if n.startswith(prefix)}

    def since(self, before: ArmProof, name: str, role: str | None = None) -> float:
        """How much counter ``name`` grew from ``before`` to this proof, summed over processes (by pid)."""
        then = {p.pid: p.count(name) for p in before.processes}
        return sum(p.count(name) - then.get(p.pid, 0.0) for p in self.processes if role is None or p.role == role)

    def required(self) -> tuple[ProcessProof, ...]:
        """The processes the flush waited for (all, where the proof does not say)."""
        live = self.extra.get("live_pids")
        return self.processes if live is None else tuple(p for p in self.processes if p.pid in set(live))

    def summary(self) -> dict[str, float]:
        """Flat numbers summed over processes (the per-seq counters left out: they are the proof's; so are the batch
        sizes, which are per process and never summed: ``engine.running``)."""
        names = sorted({n for p in self.processes for n in p.counters if not n.startswith(("seq.", RUNNING_BATCH))})
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
                d.get("arm_seq"),
                d.get("arm_now"),
                tuple(d.get("arm_errors", ())),
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
            return ArmProof(proof.processes, {"flush_missing_pids": missing, "live_pids": sorted(live_pids)})
        waiter.wait(0.05)


def launch_arm_of(spec: EngineSpec) -> LiveArm:
    """The arm ``spec``'s engine starts on (seq 0): the plugin's reading of the environment the engine gets."""
    return launch_arm({**spec.env(), **spec.build.environ()})


def on_launch(arm: LiveArm, spec: EngineSpec) -> LiveArm:
    """``arm`` as switched on ``spec``'s engine: the named patches its build was launched with keep their
    milliseconds unless ``arm`` names them (a patched candidate stays patched on every arm it serves)."""
    patches = {**launch_arm_of(spec).patch_ms, **arm.patch_ms}
    return replace(arm, patches=tuple(patches.items()))


def arm_problems(spec: EngineSpec, proof: ArmProof) -> list[str]:
    """Every way in which the proof contradicts the launch arm over the engine's life (empty: it ran as requested);
    an engine switched to another arm since is one of them (judge its windows with ``live_arm_problems``)."""
    launch = launch_arm_of(spec)
    return live_arm_problems(spec, launch, ArmProof(extra={"arm_seq": 0, "arm": launch.to_dict()}), proof)


def live_arm_problems(spec: EngineSpec, arm: LiveArm, before: ArmProof, after: ArmProof) -> list[str]:
    """Every way in which the counters from ``before`` to ``after`` contradict ``arm`` (see the module docstring).
    The arm's seq is ``before.extra["arm_seq"]`` (``EngineHandle.proof`` and ``set_arm`` say it), else the one the
    processes of ``before`` report, else 0."""
    if not after.processes:
        return [NO_PROOF]
    seq = _expected_seq(before)
    problems: list[str] = []
    judged = before.extra.get("arm")
    if judged is not None and judged != arm.to_dict():
        problems.append(f"the engine's live arm (seq {seq}) is {_label(judged)}, not {arm.label}: switch it first "
                        "(EngineHandle.set_arm)")
    for proof, when in ((before, "before"), (after, "after")):
        problems += _process_problems(arm, seq, proof, when)
    if not after.by_role("http_server") + after.by_role("tokenizer_worker"):
        problems.append("no proof from the HTTP/tokenizer process (the one that runs wrap_shm_features)")
    if spec.mm_feature_transport == "cpu":
        problems += _copy_problems(arm, seq, before, after) + _thread_problems(arm, before, after)
    else:
        problems += _ipc_problems(arm, seq, before, after)
    problems += _patch_state_problems(arm, after) + _patch_call_problems(arm, before, after)
    return list(dict.fromkeys(problems))


def switch_problems(arm: LiveArm, seq: int, proof: ArmProof) -> list[str]:
    """Why ``arm`` as ``seq`` did not take in every live engine process (empty: it took)."""
    required = proof.required()
    if not required:
        return [NO_PROOF]
    missing = set(proof.extra.get("flush_missing_pids") or ())
    problems = [f"pid {pid} wrote no proof at all" for pid in sorted(missing - {p.pid for p in required})]
    for p in required:
        if p.pid in missing:
            problems.append(f"{p.who} did not answer the proof flush (its last proof: seq {p.arm_seq}, {p.arm_label})")
        elif p.arm_seq != seq or p.arm_now != arm.to_dict():
            problems.append(f"{p.who} reports seq {p.arm_seq} ({p.arm_label})")
        problems += [f"{p.who}: {e}" for e in p.arm_errors]
    return problems + _patch_state_problems(arm, proof)


def _label(arm: Mapping[str, Any]) -> str:
    try:
        return LiveArm.from_dict(arm).label
    except (TypeError, ValueError):
        return repr(dict(arm))


def _expected_seq(before: ArmProof) -> int:
    seq = before.extra.get("arm_seq")
    if isinstance(seq, int):
        return seq
    seqs = {p.arm_seq for p in before.required() if p.arm_seq is not None}
    return max(seqs) if seqs else 0


def _process_problems(arm: LiveArm, seq: int, proof: ArmProof, when: str) -> list[str]:
    out = []
    missing = list(proof.extra.get("flush_missing_pids") or ())
    if missing:
        out.append(f"pids {missing} did not answer the proof flush {when} the window (their proofs are stale)")
    for p in proof.processes:
        out += [f"{p.who}: {e}" for e in (*p.errors, *p.arm_errors)]
    for p in proof.required():
        if p.arm_seq != seq or p.arm_now != arm.to_dict():
            out.append(f"{p.who} was on arm seq {p.arm_seq} ({p.arm_label}) {when} the window, not on seq {seq} "
                       f"({arm.label})")
    return out


def _copy_problems(arm: LiveArm, seq: int, before: ArmProof, after: ArmProof) -> list[str]:
    out = []
    prefix = f"seq.{seq}.shm_copies_"
    by_label = {n.removeprefix(prefix): after.since(before, n) for n in after.names(prefix)}
    if arm.copy == "stock":  # SGLang's own code, whatever it copies with: its label in each process
        want = {str(p.installed["copy_impl.stock"]) for p in after.processes if "copy_impl.stock" in p.installed}
    else:
        want = {arm.copy}
    wrong = {label: n for label, n in by_label.items() if label not in want and n}
    if wrong:
        impls = sorted({f"{k.removeprefix('copy_impl.')}={v}" for p in after.processes for k, v in p.installed.items()
                        if k.startswith("copy_impl.")})
        out.append(f"copy={arm.copy} requested but {sum(wrong.values()):g} SHM copies ran another implementation "
                   f"({', '.join(f'{k}: {n:g}' for k, n in sorted(wrong.items()))}); installed: {', '.join(impls)}")
    if not sum(n for label, n in by_label.items() if label in want):
        out.append(f"copy={arm.copy} requested but zero {'/'.join(sorted(want)) or 'SGLang'} SHM copies were "
                   f"recorded under arm seq {seq}: {NO_SHM}")
    elsewhere = sum(after.since(before, n) for n in after.names("seq.") if ".shm_copies_" in n
                    and not n.startswith(prefix))
    if elsewhere:
        out.append(f"{elsewhere:g} SHM copies in the window ran under another arm seq than {seq}: a process was not "
                   "switched")
    return out


def _thread_problems(arm: LiveArm, before: ArmProof, after: ArmProof) -> list[str]:
    out = []
    for p in after.processes:
        want = str(arm.threads) if arm.threads is not None else p.installed.get("copy_threads_launch")
        then = before.process(p.pid)
        for name in sorted(n for n in p.counters if n.startswith("copies_threads.")):
            ran = name.removeprefix("copies_threads.")
            grew = p.count(name) - (then.count(name) if then is not None else 0.0)
            if grew and ran != want:
                out.append(f"threads={arm.threads if arm.threads is not None else 'launch'} requested but {grew:g} "
                           f"SHM copies in {p.who} ran with {ran} thread(s), not {want}")
    return out


def _ipc_problems(arm: LiveArm, seq: int, before: ArmProof, after: ArmProof) -> list[str]:
    out = []
    rebuilds = after.since(before, "ipc_rebuilds", "scheduler")
    opens = after.since(before, "ipc_opens", "scheduler")
    if not rebuilds:
        out.append(f"cuda_ipc requested but schedulers rebuilt zero IPC features: {NO_IPC}")
    mains = after.by_role("http_server") + after.by_role("tokenizer_worker")
    stock = {p.installed["ipc_cache_stock"] for p in mains if "ipc_cache_stock" in p.installed}
    value = arm.ipc_cache if arm.ipc_cache != "stock" else (next(iter(stock)) if len(stock) == 1 else None)
    if any("ipc_cache_layout" in p.installed for p in mains):  # the switch is there: its proxies say what they carried
        prefix = f"seq.{seq}.ipc_proxies_cache_"
        made = {v: after.since(before, prefix + v) for v in ("on", "off")}
        for v, n in made.items():
            if n and value is not None and v != value:
                out.append(f"ipc_cache={arm.ipc_cache} requested but {n:g} CUDA IPC proxies carried cache={v}")
        if rebuilds and value is not None and not made[value]:
            out.append(f"ipc_cache={arm.ipc_cache} requested but zero CUDA IPC proxies with cache={value} were made "
                       f"under arm seq {seq} while schedulers rebuilt {rebuilds:g} features")
        elsewhere = sum(after.since(before, n) for n in after.names("seq.") if ".ipc_proxies_cache_" in n
                        and not n.startswith(prefix))
        if elsewhere:
            out.append(f"{elsewhere:g} CUDA IPC proxies in the window were made under another arm seq than {seq}")
    if rebuilds and value == "on" and opens / rebuilds > CACHED_OPENS_PER_REBUILD_MAX:
        out.append(f"ipc_cache={arm.ipc_cache} (cache on) requested but {opens:g} IPC opens for {rebuilds:g} rebuilds "
                   f"(> {CACHED_OPENS_PER_REBUILD_MAX} per rebuild): the pool-handle cache did not work")
    elif rebuilds and value == "off" and opens / rebuilds < UNCACHED_OPENS_PER_REBUILD_MIN:
        out.append(f"ipc_cache={arm.ipc_cache} (cache off) requested but only {opens:g} IPC opens for {rebuilds:g} "
                   "rebuilds: handles were cached anyway")
    return out


def _patch_state_problems(arm: LiveArm, proof: ArmProof) -> list[str]:
    """Each patch the arm names runs at its milliseconds wherever it is installed; one that is named but installed
    nowhere cannot run (patches are installed at launch); an installed one the arm does not name runs at 0 ms."""
    out = []
    wanted = arm.patch_ms
    for name in sorted(set(wanted) | {n for p in proof.processes for n in p.patch_ms_now}):
        ms = wanted.get(name, 0.0)
        holders = [p for p in proof.required() if name in p.patch_ms_now]
        if not holders and ms > 0:
            out.append(f"patch {name}={ms:g} ms requested but no engine process carries it: start the engine with "
                       f"the patch in its build (patch:{name}=MS)")
        out += [f"patch {name}: {p.who} runs {p.patch_ms_now[name]:g} ms, not {ms:g}" for p in holders
                if p.patch_ms_now[name] != ms]
    return out


def _patch_call_problems(arm: LiveArm, before: ArmProof, after: ArmProof) -> list[str]:
    out = []
    for name, ms in arm.patches:
        calls = after.since(before, f"patch_calls.{name}")
        spun = after.since(before, f"patch_ms.{name}")
        if ms > 0 and not calls:
            out.append(f"patch {name}={ms:g} ms requested but it was called zero times in the window")
        elif calls and abs(spun - calls * ms) > 1e-6 * max(1.0, spun):
            out.append(f"patch {name}: {spun:g} ms spun over {calls:g} calls in the window, not {ms:g} ms each")
    return out

def assert_arm(spec: EngineSpec, proof: ArmProof) -> None:
    """Raise ConfigError listing every contradiction between the requested arm and what ran."""
    problems = arm_problems(spec, proof)
    if problems:
        raise ConfigError(f"arm {spec.arm} did not run as requested: " + "; ".join(problems))

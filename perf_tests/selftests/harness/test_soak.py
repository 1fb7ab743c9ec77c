"""The harness under faults: engine-fixture cycles against the stub engine, a seeded random fault in each.

Faults: crash before ready; crash mid-load; SIGTERM ignored; port taken; missing model; quota refused (a
read-only cgroup tree: EROFS from the kernel; or a v1 child quota above its parent's: EINVAL); /dev/shm nearly
full (a 64 MiB tmpfs at /dev/shm in a private mount namespace); a start slower than the deadline. Each must
surface as the error class and message that name it, within its deadline, never as a pass. Afterwards nothing
of the soak's may be left: processes (by its own environment marker, so orphans re-parented to init count too),
its engines' /dev/shm pools (by the names they logged), its cgroups (by this run's owner token), its ports (a
listener of its own), temp directories (its private TMPDIR); what another suite on the box has is not counted.
Every cycle's engine maps a
1 MiB SGLang-named segment, so a crash can leak one; the fixture must remove and report it.

The short form (12 cycles, every fault at least once) runs in CI; the full 100 cycles are marked slow+soak.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil
import pytest

from engine_fixtures.engine.factory import EngineFactory
from engine_fixtures.engine.spec import EngineSpec
from engine_fixtures.errors import ConfigError, ProcessCrashed, ProcessStartError, ProcessStopError, QuotaNotPermitted
from engine_fixtures.isolation import owner
from engine_fixtures.isolation.cgroups import (
    CpuQuota,
    configure_parent,
    configured_parent,
    owner_of_sandbox,
    probe_quota_support,
)
from engine_fixtures.isolation.leaks import SHM_DIR, find_cgroups
from engine_fixtures.loadgen.stream import LoadStream
from engine_fixtures.loadgen.workload import WorkloadSpec
from engine_fixtures.model.modeldir import write_model_dir
from engine_fixtures.scenarios.segment import SegmentPlan, measure_segment
from engine_fixtures.scenarios.timeline import Timeline
from perf_tests.support import faults, launcher

STUB = launcher("stub_engine")
SEED = 15
READY_S, SLOW_READY_S, GRACE_S = 30.0, 3.0, 1.0
FAULTS = ("crash-before-ready", "crash-mid-load", "sigterm-ignored", "port-taken", "missing-model",
          "quota-refused", "shm-nearly-full", "slow-start")
POOL_RE = re.compile(r"stub_engine: shm pool /dev/shm/(sgl_shm_stub_[0-9a-f]+)")
WORKLOAD = WorkloadSpec(num_requests=4, concurrency=2, images_per_request=0, output_tokens=8, request_timeout_s=20.0)


@dataclass(frozen=True)
class Expect:
    errors: tuple[type[BaseException], ...]
    pattern: str
    deadline_s: float  # from the fixture call to the error


EXPECT: dict[str, Expect] = {
    "crash-before-ready": Expect((ProcessStartError,), r"exited with code 3 before it was ready.*CUDA out of memory",
                                 READY_S),
    "crash-mid-load": Expect((ProcessCrashed,), r"exited with code 70 while being measured.*illegal memory access",
                             READY_S + WORKLOAD.request_timeout_s),
    "sigterm-ignored": Expect((ProcessStopError,), rf"ignored SIGTERM for {GRACE_S:g} s and was SIGKILLed",
                              READY_S + GRACE_S + 10.0),
    "port-taken": Expect((ConfigError,), r"port \d+ on 127\.0\.0\.1 is already in use by pid", 5.0),
    "missing-model": Expect((ConfigError,), r"no-such-model.*python -m engine_fixtures\.model\.modeldir", 5.0),
    "quota-refused": Expect((QuotaNotPermitted, ConfigError),
                            r"cannot create cgroup .*Read-only file system|the kernel rejected 1\.5 cores", 5.0),
    "shm-nearly-full": Expect((ConfigError,), r"/dev/shm is nearly full: \d+ MiB free of 64 MiB.*filler", 10.0),
    "slow-start": Expect((ProcessStartError,), rf"was not ready after .* of its {SLOW_READY_S:.1f} s budget.*"
                         r"raise the deadline", SLOW_READY_S + GRACE_S + 10.0),
}


@dataclass(frozen=True)
class Cycle:
    index: int
    fault: str
    error: str | None
    elapsed_s: float
    ok: bool
    why: str = ""


def plan(cycles: int, seed: int = SEED) -> list[str]:
    """Every fault at least once, the rest drawn at random; shuffled. Seeded: the same list on every run."""
    rng = random.Random(seed)
    faults_ = list(FAULTS) + rng.choices(FAULTS, k=max(0, cycles - len(FAULTS)))
    rng.shuffle(faults_)
    return faults_[:cycles]


class Soak:
    def __init__(self, root: Path, model: Path, quota: bool, ro_tree: Path | None, v1_parent: Path | None) -> None:
        self.root, self.model, self.quota = root, model, quota
        self.ro_tree, self.v1_parent = ro_tree, v1_parent
        self.marker = f"soak-{uuid.uuid4().hex[:8]}"
        self.findings: list[str] = []
        self.ports: set[int] = set()
        self.factory = EngineFactory(root / "engines", READY_S, stop_grace_s=GRACE_S, on_finding=self.findings.append)
        self.slow = EngineFactory(root / "slow", SLOW_READY_S, stop_grace_s=GRACE_S, on_finding=self.findings.append)

    def spec(self, *stub_args: str, quota: float | str | None = "auto", model: Path | None = None) -> EngineSpec:
        """The stub under a 1-core quota where quotas work here ("auto"), else the quota given."""
        cores = (1.0 if self.quota else None) if quota == "auto" else quota
        return EngineSpec(model or self.model, launcher=STUB, name="soak", proof=False, cpu_quota=cores,  # type: ignore[arg-type]
                          env_extra=(("PERF_SOAK_ID", self.marker),), extra_args=("--stub-shm-mb", "1", *stub_args))

    @contextlib.contextmanager
    def parent(self, path: Path) -> Iterator[None]:
        previous = configured_parent()
        configure_parent(path)
        try:
            yield
        finally:
            configure_parent(previous)

    def _mid_load(self) -> None:
        handle = self.factory.get(self.spec("--stub-mode", "crash-mid-load"))
        self.ports.add(handle.port)
        with LoadStream() as stream:
            measure_segment(handle, stream, SegmentPlan(WORKLOAD, 2, 1.0, 0.2, proof=False), Timeline())

    def _ignores_sigterm(self) -> None:
        handle = self.factory.get(self.spec("--stub-mode", "ignore-sigterm"))
        self.ports.add(handle.port)
        self.factory.release(handle.spec)

    def _port_taken(self) -> None:
        with faults.taken_port() as port:
            self.factory.get(self.spec(), port=port)

    def _quota_refused(self, index: int) -> None:
        if self.ro_tree is not None and (index % 2 == 0 or self.v1_parent is None):
            with self.parent(self.ro_tree):  # the kernel refuses the mkdir: EROFS
                self.factory.get(self.spec(quota=1.0))
        else:
            assert self.v1_parent is not None
            with self.parent(self.v1_parent):  # the kernel refuses a child quota above the parent's: EINVAL
                self.factory.get(self.spec(quota=1.5))

    def action(self, fault: str, index: int) -> Callable[[], object]:
        return {
            "crash-before-ready": lambda: self.factory.get(self.spec("--stub-mode", "crash-before-ready")),
            "crash-mid-load": self._mid_load,
            "sigterm-ignored": self._ignores_sigterm,
            "port-taken": self._port_taken,
            "missing-model": lambda: self.factory.get(self.spec(model=self.root / "no-such-model")),
            "quota-refused": lambda: self._quota_refused(index),
            "slow-start": lambda: self.slow.get(self.spec("--stub-mode", "slow-start", "--stub-start-s", "60")),
        }[fault]

    def cycle(self, index: int, fault: str) -> Cycle:
        expect = EXPECT[fault]
        if fault == "shm-nearly-full":
            met = faults.shm_nearly_full_cycle(self.root / "shm-full", self.model, (("PERF_SOAK_ID", self.marker),))
            error, message, elapsed = met.type, met.message, met.elapsed_s
            names = {e.__name__ for e in expect.errors}
            right = error in names
        else:
            t0 = time.monotonic()
            try:
                self.action(fault, index)()
                error, message, right = None, "the cycle passed", False
            except Exception as exc:
                error, message, right = type(exc).__name__, str(exc), isinstance(exc, expect.errors)
            elapsed = time.monotonic() - t0
            for factory in (self.factory, self.slow):
                try:
                    factory.close()
                except Exception as exc:  # a leak found at the stop is a failed cycle, not a crash of the soak
                    right, message = False, f"{message}\nand at the stop: {type(exc).__name__}: {exc}"
        matched = right and re.search(expect.pattern, message, re.S) is not None
        in_time = elapsed <= expect.deadline_s
        why = "" if matched and in_time else (
            f"expected {'/'.join(e.__name__ for e in expect.errors)} matching {expect.pattern!r} within "
            f"{expect.deadline_s:g} s; got {error} after {elapsed:.1f} s: {_shorten(message)}")
        return Cycle(index, fault, error, round(elapsed, 2), matched and in_time, why)

    def pools(self) -> set[str]:
        """The /dev/shm pools this soak's engines made (each stub prints its pool's name into its log): the only
        segments a cycle can leak in /dev/shm (the nearly-full cycle's /dev/shm is a private tmpfs). By name, not
        by what is new in /dev/shm: another suite on this box makes its own segments meanwhile."""
        return {m for log in self.root.rglob("*.log") for m in POOL_RE.findall(log.read_text(errors="replace"))}

    def leftovers(self, tmpdir: Path) -> dict[str, list[str]]:
        marked = [p for p in psutil.pids() if _has_marker(p, self.marker)]
        with contextlib.suppress(psutil.Error):  # orphans of a crashed tree exit on EOF: give them a moment
            psutil.wait_procs([psutil.Process(p) for p in marked if psutil.pid_exists(p)], timeout=10)
        run = owner.current()  # every sandbox of this soak carries this run's token (another suite's carry theirs)
        return {
            "processes": [str(p) for p in psutil.pids() if _has_marker(p, self.marker)],
            "shm": sorted(n for n in self.pools() if (SHM_DIR / n).exists()),
            "cgroups": [str(p) for p in find_cgroups("perf-soak-") if owner_of_sandbox(p.name) == run],
            "ports": [str(p) for p in _listening(self.ports, self.marker)],
            "temp_dirs": sorted(p.name for p in tmpdir.iterdir()),
        }


def _shorten(text: str, keep: int = 700) -> str:
    return text if len(text) <= 2 * keep else f"{text[:keep]} [...] {text[-keep:]}"


def _listening(ports: set[int], marker: str) -> list[int]:
    """This soak's ports one of its processes still listens on (a port in TIME_WAIT after a crash cannot be bound,
    but is not leaked; another suite's engine may have been given the same port since)."""
    return sorted({c.laddr.port for c in psutil.net_connections(kind="tcp")
                   if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port in ports
                   and (c.pid is None or _has_marker(c.pid, marker))})


def _has_marker(pid: int, marker: str) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            if f"PERF_SOAK_ID={marker}".encode() not in fh.read():
                return False
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except (OSError, psutil.Error):
        return False


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every temp file and directory the harness and its children make goes here, so any left is counted."""
    d = tmp_path / "tmpdir"
    d.mkdir()
    monkeypatch.setenv("TMPDIR", str(d))
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    return d


@pytest.mark.parametrize("cycles", [pytest.param(12, id="short"),
                                    pytest.param(100, id="full", marks=[pytest.mark.slow, pytest.mark.soak])])
def test_soak(cycles: int, tmp_path: Path, private_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    no_root = faults.why_not_root()
    if no_root is not None:
        pytest.skip(f"the soak makes its faults with real mounts and cgroups: it {no_root}")
    model = write_model_dir(tmp_path / "model" / "qwen-tiny", "tiny")
    quota = probe_quota_support() is None
    with contextlib.ExitStack() as stack:
        ro_tree = stack.enter_context(faults.ReadOnlyCgroupTree(tmp_path / "ro-cgroup"))
        outer = stack.enter_context(CpuQuota(0.5, name="soakouter")) if quota else None
        v1_parent = outer.path if outer is not None and outer.version == 1 else None
        soak = Soak(tmp_path, model, quota, ro_tree, v1_parent)
        results = [soak.cycle(i, fault) for i, fault in enumerate(plan(cycles))]
    left = soak.leftovers(private_tmp)
    worst = max(results, key=lambda c: c.elapsed_s)
    per_fault = {f: max(c.elapsed_s for c in results if c.fault == f) for f in FAULTS if any(c.fault == f
                                                                                         for c in results)}
    report = {"cycles": cycles, "seed": SEED, "faults": dict(Counter(c.fault for c in results)),
              "failed": [asdict(c) for c in results if not c.ok], "leftovers": {k: len(v) for k, v in left.items()},
              "worst_time_to_error_s": worst.elapsed_s, "worst_fault": worst.fault, "worst_per_fault_s": per_fault,
              "engine_leftovers_removed_by_the_fixture": len(soak.findings), "quota_cycles": quota}
    (tmp_path / "soak-report.json").write_text(json.dumps(report, indent=2))
    with capsys.disabled():
        print(f"\nsoak: {json.dumps(report)}")
    assert [c for c in results if not c.ok] == [], "\n".join(c.why for c in results if not c.ok)
    assert left == {k: [] for k in left}, left

"""Start one engine (SGLang or any command with SGLang's HTTP surface) and hand out an ``EngineHandle``.

Contract of ``start_engine``: the model directory is checked first (``model.modeldir.check_model_dir``:
ConfigError naming the fix), then /dev/shm has ``shm_min_free_mb`` free (ConfigError naming the space, the
largest entries and the fixes), the port is free (ConfigError naming who holds it), the engine starts in a new
session inside ``CpuQuota(spec.cpu_quota)`` when a quota is set, and is ready when ``/health`` answers 200
within ``deadline_s``; an early exit or a missed deadline raises ProcessStartError with the exit status and
the log tail, after everything started was stopped again (processes, cgroup). ``EngineHandle.stop()`` is
idempotent.

Live arms: the engine starts on its launch arm (``proof.launch_arm_of(spec)``: ``EngineSpec.copy`` / ``ipc_cache``
and the build's named patches, seq 0; ``EngineHandle.arm``). ``set_arm(arm)`` switches every engine process to
another ``transport.live.LiveArm`` while it runs: it writes ``<proof dir>/arms.json`` atomically under the next seq,
flushes the proofs (each process applies the file before it answers) and raises ``MeasurementError``, naming the
processes and what they report, unless every live plugin process reports that seq and arm. ``proof()`` says the
handle's live seq and arm in ``ArmProof.extra`` (``arm_seq``, ``arm``), which ``proof.live_arm_problems`` judges.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Iterable, Mapping
from contextlib import ExitStack
from dataclasses import replace
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil

from engine_fixtures import sglang_version
from engine_fixtures.engine.prometheus import MetricsSnapshot, scrape
from engine_fixtures.engine.proof import ArmProof, launch_arm_of, request_flush, switch_problems
from engine_fixtures.engine.server_info import EffectiveConfig, fetch_server_info, http_json
from engine_fixtures.engine.spec import EngineSpec
from engine_fixtures.errors import ConfigError, LeakError, MeasurementError, ProcessCrashed
from engine_fixtures.isolation import roles
from engine_fixtures.isolation.cgroups import CpuQuota
from engine_fixtures.isolation.leaks import shm_held_by_tree
from engine_fixtures.isolation.pinning import RolePlacement, pin_roles
from engine_fixtures.isolation.process import (
    LaunchSpec,
    StopReport,
    Supervised,
    curated_env,
    free_port,
    require_free_port,
)
from engine_fixtures.isolation.shm_space import require_shm_space
from engine_fixtures.isolation.signals import wait_exited
from engine_fixtures.model.modeldir import check_model_dir
from engine_fixtures.sglang_plugin import PROOF_DIR_ENV
from engine_fixtures.sglang_plugin.arm_state import write_arm_file
from engine_fixtures.sglang_plugin.distinfo import GROUP, TARGET, write_dist_info
from engine_fixtures.sglang_plugin.patches import TARGETS
from engine_fixtures.transport.live import ARMS_FILE, LiveArm

REPO_ROOT = Path(__file__).resolve().parents[2]
HTTP_TIMEOUT_S = 10.0
STOP_GRACE_S = 10.0  # SIGTERM to SIGKILL
SHM_MIN_FREE_MB = 256  # the images in flight cross /dev/shm (SGLang falls back to inline transport, silently)


def _plugin_installed() -> bool:
    return any(e.value == TARGET for e in metadata.entry_points(group=GROUP))


def engine_env(spec: EngineSpec, workdir: Path, version: str | None) -> dict[str, str]:
    """Curated environment for the engine: arms, caches, proof dir, and a PYTHONPATH that finds the plugin."""
    extra = {**spec.env(version), **spec.build.environ()}
    paths = [*spec.build.import_paths(workdir), str(REPO_ROOT)]
    if spec.proof:
        proof_dir = workdir / "proof"
        proof_dir.mkdir(parents=True, exist_ok=True)
        (proof_dir / ARMS_FILE).unlink(missing_ok=True)  # a fresh engine starts on its launch arm
        extra[PROOF_DIR_ENV] = str(proof_dir)
        if not _plugin_installed():
            paths.insert(0, str(write_dist_info(workdir / "plugin-path").parent))
    env = curated_env(extra)
    env["PYTHONPATH"] = ":".join([*paths, *filter(None, [env.get("PYTHONPATH", "")])])
    return env


class EngineHandle:
    """A running engine: URL, roles, effective config, metrics, cache flush, arm proof, stop."""

    def __init__(
        self,
        spec: EngineSpec,
        proc: Supervised,
        port: int,
        workdir: Path,
        stack: ExitStack,
        quota: CpuQuota | None,
        version: str | None,
    ) -> None:
        self.spec = spec
        self.proc = proc
        self.port = port
        self.workdir = workdir
        self.quota = quota
        self.version = version
        self.url = f"http://127.0.0.1:{port}"
        self.ready_s: float | None = None
        self._stack = stack
        self._config: EffectiveConfig | None = None
        self._stopped: StopReport | None = None
        self._known: dict[int, psutil.Process] = {}
        self.arm: LiveArm = launch_arm_of(spec)  # the live arm every engine process was last proved to run
        self.arm_seq = 0
        self.pinned: dict[str, tuple[int, ...]] = {}  # role -> CPUs, where the spec pins roles (``role_cpus``)

    # ------------------------------------------------------------------ facts
    @property
    def log_path(self) -> Path:
        return self.proc.spec.log_path

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def proof_dir(self) -> Path:
        return self.workdir / "proof"

    def url_for(self, *parts: str) -> str:
        return self.url + "/" + "/".join(p.strip("/") for p in parts)

    def pids(self) -> Mapping[str, tuple[int, ...]]:
        """Live pids by role (``http_server``, ``scheduler``, ``detokenizer``, ...), from process titles."""
        found = roles.discover(self.pid, roles.SGLANG_ROLES)
        self._remember(p for pids in found.values() for p in pids)
        return found

    def place(self, placement: RolePlacement) -> None:
        """Every thread of every process of this engine onto its role's CPUs of ``placement`` (``pin_roles``; the
        stage of a group alive together, ``isolation.pinning.Stage``); ``pinned`` says where each role went."""
        self.pinned = pin_roles(self.pids(), placement)

    def _remember(self, pids: Iterable[int]) -> None:
        for pid in pids:
            if pid != self.pid and pid not in self._known:
                with contextlib.suppress(psutil.Error):
                    self._known[pid] = psutil.Process(pid)

    def _reap_orphans(self, timeout_s: float = 10.0) -> None:
        """Stop descendants seen earlier that outlived the root (e.g. after the root was SIGKILLed)."""
        left = [p for p in self._known.values() if p.is_running()]
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for p in left:
                with contextlib.suppress(psutil.Error):
                    p.send_signal(sig)
            left = wait_exited(left, timeout_s)
            if not left:
                return
        raise LeakError(f"engine processes {[p.pid for p in left]} survived SIGKILL for {timeout_s} s")

    def log_tail(self, lines: int = 40) -> str:
        return self.proc.log_tail(lines)

    def ensure_alive(self) -> None:
        """ProcessCrashed (exit status + log tail) if the engine has exited."""
        self.proc.ensure_alive()

    # ------------------------------------------------------------------ HTTP
    def _http(self, path: str, method: str = "GET", timeout_s: float = HTTP_TIMEOUT_S) -> tuple[int, Any]:
        try:
            return http_json(self.url + path, timeout_s, method)
        except OSError as exc:
            self.ensure_alive()
            raise ProcessCrashed(
                f"engine at {self.url} did not answer {method} {path} within {timeout_s} s "
                f"({exc}); log tail:\n{self.log_tail()}"
            ) from None

    def health(self, timeout_s: float = HTTP_TIMEOUT_S) -> bool:
        """True iff ``/health`` answers 200 (SGLang: warmup done)."""
        try:
            status, _ = http_json(self.url + "/health", timeout_s)
        except OSError:
            return False
        return status == 200

    @property
    def config(self) -> EffectiveConfig:
        """The effective configuration read back from ``/server_info`` (cached after the first read)."""
        if self._config is None:
            self.ensure_alive()
            self._config = fetch_server_info(self.url, HTTP_TIMEOUT_S)
        return self._config

    def metrics(self) -> MetricsSnapshot:
        self.ensure_alive()
        return scrape(self.url, HTTP_TIMEOUT_S)

    def flush_cache(self, timeout_s: float = 30.0) -> bool:
        """POST ``/flush_cache``; True if flushed, False if the engine refused (requests in flight)."""
        status, _ = self._http("/flush_cache", "POST", timeout_s)
        return status == 200

    def proof(self, deadline_s: float = 10.0) -> ArmProof:
        """Ask every live engine process to flush its proof now and read all proofs back."""
        if not self.spec.proof:
            raise ConfigError("this engine was started with EngineSpec(proof=False); there is no arm proof")
        pids = self.pids()  # processes that load SGLang plugins (0.5.16: not the detokenizer)
        live = {self.pid, *pids.get("scheduler", ()), *pids.get("tokenizer_worker", ())}
        proof = request_flush(self.proof_dir, live, deadline_s)
        return replace(proof, extra={**proof.extra, "arm_seq": self.arm_seq, "arm": self.arm.to_dict()})

    def set_arm(self, arm: LiveArm, deadline_s: float = 10.0) -> ArmProof:
        """Switch every engine process to ``arm`` under a new seq and return the proof that each live one runs it
        (its ``extra`` names the seq); MeasurementError naming the processes and what they report otherwise."""
        if not self.spec.proof:
            raise ConfigError("this engine was started with EngineSpec(proof=False); its arm cannot be switched live "
                              "(the plugin is what switches it): start it with proof=True")
        transport = self.spec.mm_feature_transport
        if transport != "cuda_ipc" and arm.ipc_cache != "stock":
            raise ConfigError(f"live arm {arm.label}: the IPC pool-handle cache does nothing on the {transport} "
                              "transport; use ipc_cache='stock' or an engine with mm_feature_transport='cuda_ipc'")
        if transport != "cpu" and (arm.copy != "stock" or arm.threads is not None):
            raise ConfigError(f"live arm {arm.label}: the SHM copy and its thread cap are not what the {transport} "
                              "transport runs; use copy='stock', threads=None or an engine with "
                              "mm_feature_transport='cpu'")
        unknown = sorted(set(arm.patch_ms) - set(TARGETS))
        if unknown:
            raise ConfigError(f"live arm {arm.label}: unknown patch(es) {unknown}; known patches are "
                              f"{', '.join(sorted(TARGETS))}")
        self.ensure_alive()
        seq = self.arm_seq + 1
        write_arm_file(self.proof_dir, arm, seq)
        self.arm, self.arm_seq = arm, seq  # what the engine was told, proved below or not
        proof = self.proof(deadline_s)  # every live process applies arms.json before it answers the flush
        problems = switch_problems(arm, seq, proof)
        if problems:
            raise MeasurementError(f"engine {self.instance} ({self.url}): live arm {arm.label} (seq {seq}) did not "
                                   f"take in every engine process: {'; '.join(problems)}")
        return proof

    def set_patch(self, magnitudes: Mapping[str, float]) -> ArmProof:
        """Change the named patches' milliseconds in every engine process (``sglang_plugin.patches``), the rest of
        the live arm kept: ``set_arm`` with those patches (MeasurementError when it does not take)."""
        patches = {**self.arm.patch_ms, **{k: float(v) for k, v in magnitudes.items()}}
        return self.set_arm(replace(self.arm, patches=tuple(patches.items())))

    @property
    def instance(self) -> str:
        """This engine instance's name (its work directory: start number and launch key)."""
        return self.workdir.name

    def set_quota(self, cores: float | None) -> None:
        """Rewrite the live engine's CPU quota (cgroup v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``); the spec follows.
        ConfigError when the engine was started without a cgroup sandbox (the factory then starts a fresh one)."""
        if self.quota is None:
            raise ConfigError(f"engine {self.instance} runs without a cgroup sandbox, so its CPU quota cannot change; "
                              "start it with a sandbox (EngineFactory does when quotas are permitted)")
        self.quota.set_cores(cores)
        self.spec = self.spec.with_(cpu_quota=cores)

    # ------------------------------------------------------------------ stop
    def stop(self, grace_s: float = STOP_GRACE_S) -> StopReport:
        """Stop the whole tree (SIGTERM, SIGKILL after ``grace_s``), then remove the cgroup. Idempotent."""
        if self._stopped is None:
            try:
                self._stopped = self.proc.stop(grace_s)
                self._reap_orphans()
            finally:
                self._stack.close()
        return self._stopped

    def __repr__(self) -> str:
        return f"EngineHandle({self.spec.name} pid={self.pid} {self.url} arm={self.spec.arm})"


def start_engine(
    spec: EngineSpec,
    workdir: Path,
    *,
    deadline_s: float,
    python: str = sys.executable,
    port: int | None = None,
    shm_min_free_mb: float = SHM_MIN_FREE_MB,
    sandbox: bool = False,
    shm_seen: set[str] | None = None,
) -> EngineHandle:
    """Launch ``spec`` and wait until it is ready; see the module docstring for the error contract. A start that
    fails adds to ``shm_seen`` the /dev/shm names its tree held just before it was stopped (the leak check's
    evidence that a leftover is this engine's)."""
    check_model_dir(Path(spec.model))
    require_shm_space(shm_min_free_mb)
    if port is None:
        port = free_port()
    else:
        require_free_port(port)
    workdir.mkdir(parents=True, exist_ok=True)
    version = None
    if spec.launcher == ("-m", "sglang.launch_server"):  # a reference build answers for its own release
        version = sglang_version.installed() if spec.build.is_default else spec.build.sglang_version(workdir, python)
    env = engine_env(spec, workdir, version)
    launch = LaunchSpec(
        tuple(spec.argv(spec.build.interpreter(python), port, version)), workdir / "engine.log", env, cwd=workdir,
        name=spec.name, cpus=spec.cpus
    )
    stack = ExitStack()
    proc = None
    try:
        # sandbox=True: a cgroup even without a quota (unlimited, accounted), so a later scenario can set one live
        wanted = spec.cpu_quota is not None or sandbox
        quota = stack.enter_context(CpuQuota(spec.cpu_quota, name=spec.name)) if wanted else None
        proc = Supervised.start(launch, sandbox=quota)
        stack.callback(proc.stop)  # runs before the cgroup is removed (LIFO)
        handle = EngineHandle(spec, proc, port, workdir, stack, quota, version)
        handle.ready_s = proc.wait_ready(lambda: handle.health(min(HTTP_TIMEOUT_S, deadline_s)), deadline_s)
        found = roles.wait_for_roles(
            handle.pid,
            {"scheduler": spec.tp * spec.pp, "detokenizer": 1},
            min(60.0, deadline_s),
            alive=proc.ensure_alive,
        )
        handle._remember(p for pids in found.values() for p in pids)
        if spec.role_cpus is not None:
            handle.pinned = pin_roles(roles.discover(handle.pid), spec.role_cpus)
    except BaseException:
        if shm_seen is not None and proc is not None:  # before the stop: what the tree holds now is its own
            shm_seen.update(shm_held_by_tree(proc.pid))
        stack.close()
        raise
    return handle

"""``EngineSpec``: one SGLang server configuration, its command line and its environment.

The spec is the key for engine reuse, so it holds only what changes the server. Defaults avoid FA3 and
flashinfer kernels (flashinfer must still be importable on 0.5.16) and turn the multimodal caches off, so
every request really crosses the feature transport. What differs by release is named in ``sglang_version``;
the spec applies it here:

- 0.5.16 defaults ``SGLANG_USE_IPC_POOL_HANDLE_CACHE`` to off, >= 0.5.17 to on: set it to "1"/"0" for the
  on/off arms (``stock`` leaves the release's default).
- 0.5.17+ auto-resolves the transport (0.5.20+ switches Qwen3-VL to cuda_ipc on an H200): always pass
  ``--mm-feature-transport``.
- 0.5.18+ has a preprocessing cache: pass ``--mm-preprocess-cache-size-mb 0`` there (the flag does not exist
  before, and SGLang's parser rejects unknown flags).
The CPU-tier envs parse ``argv()`` with each release's own argument parser (perf_tests/sglang_release).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from engine_fixtures import sglang_version
from engine_fixtures.engine.build import EngineBuild
from engine_fixtures.errors import ConfigError, NotApplicable, QuotaError
from engine_fixtures.isolation.pinning import RolePlacement
from engine_fixtures.quota import QuotaSetting, checked_cores, quota_text
from engine_fixtures.transport.arms import ENGINE_COPY_ARMS

TRANSPORTS = ("cpu", "cuda_ipc")
# "stock" leaves SGLang's own behaviour alone (no copy patch; SGLANG_USE_IPC_POOL_HANDLE_CACHE unset), so a
# release is judged as shipped; "torch"/"buffer" and "on"/"off" force one implementation for A/B arms.
COPY_ARMS = ENGINE_COPY_ARMS
IPC_CACHE_ARMS = ("stock", "on", "off")
SGLANG_LAUNCHER = ("-m", "sglang.launch_server")


@dataclass(frozen=True)
class EngineSpec:
    """What to launch. ``launcher`` is the argv after the interpreter (SGLang, or the self-test stub)."""

    model: Path
    mm_feature_transport: str = "cpu"
    tp: int = 1
    pp: int = 1
    pp_max_micro_batch_size: str | int = "auto"
    pp_async_batch_depth: int = 0
    max_running_requests: int | None = None
    mem_fraction_static: float = 0.5
    kv_tokens: int | None = None  # --max-total-tokens: an explicit KV pool size (members of a group get one)
    attention_backend: str = "triton"
    mm_attention_backend: str = "triton_attn"
    sampling_backend: str = "pytorch"
    grammar_backend: str = "none"
    load_format: str = "dummy"
    vlm_cache_mb: int = 0
    radix_cache: bool = False
    cpu_quota: float | None = None  # applied to the engine's cgroup sandbox; a live engine's quota can change
    cpus: tuple[int, ...] | None = None  # CPU affinity of the whole engine tree (disjoint from the load client's)
    role_cpus: RolePlacement | None = None  # per-role pinning inside ``cpus``, applied once the engine is ready
    gpus: tuple[int, ...] = (0,)
    env_extra: tuple[tuple[str, str], ...] = ()
    enable_metrics: bool = True
    copy: str = "stock"  # SGLang as shipped, as in EngineScenario; torch and buffer are the suite's arms
    ipc_cache: str = "stock"
    proof: bool = True
    extra_args: tuple[str, ...] = ()
    launcher: tuple[str, ...] = SGLANG_LAUNCHER
    build: EngineBuild = field(default_factory=EngineBuild)
    name: str = "sglang"
    meta: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        def bad(what: str, fix: str) -> ConfigError:
            return ConfigError(f"EngineSpec: {what}; {fix}")

        if self.mm_feature_transport not in TRANSPORTS:
            raise bad(
                f"mm_feature_transport {self.mm_feature_transport!r} is unknown",
                f"use one of {', '.join(TRANSPORTS)}",
            )
        if self.copy not in COPY_ARMS:
            raise bad(f"copy arm {self.copy!r} is unknown", f"use one of {', '.join(COPY_ARMS)}")
        if self.ipc_cache not in IPC_CACHE_ARMS:
            raise bad(f"ipc_cache arm {self.ipc_cache!r} is unknown", f"use one of {', '.join(IPC_CACHE_ARMS)}")
        for label, value in (("tp", self.tp), ("pp", self.pp)):
            if not isinstance(value, int) or value < 1:
                raise bad(f"{label}={value!r} must be an int >= 1", f"pass {label}=1 or more")
        mb = self.pp_max_micro_batch_size
        if not (mb == "auto" or (isinstance(mb, int) and not isinstance(mb, bool) and mb >= 1)):
            raise bad(f"pp_max_micro_batch_size={mb!r}", "pass 'auto' or an int >= 1")
        if self.pp_async_batch_depth < 0:
            raise bad(f"pp_async_batch_depth={self.pp_async_batch_depth}", "pass 0 or more")
        if self.max_running_requests is not None and self.max_running_requests < 1:
            raise bad(f"max_running_requests={self.max_running_requests}", "pass None (auto) or >= 1")
        if self.role_cpus is not None:
            placed = {c for _r, cpus in self.role_cpus.roles for c in cpus} | set(self.role_cpus.rest)
            if self.cpus is None or not placed <= set(self.cpus):
                raise bad("role_cpus places roles outside the engine's CPUs (cpus)",
                          "derive them from the engine's set (pinning.role_placement(cpus))")
        if self.kv_tokens is not None and self.kv_tokens < 1:
            raise bad(f"kv_tokens={self.kv_tokens}", "pass None (SGLang sizes the pool) or >= 1")
        if not 0 < self.mem_fraction_static < 1:
            raise bad(f"mem_fraction_static={self.mem_fraction_static}", "pass a fraction in (0, 1)")
        try:
            checked_cores(self.cpu_quota, "cpu_quota")
        except QuotaError as exc:
            raise bad(f"cpu_quota={self.cpu_quota}", f"pass None (no quota) or cores > 0 ({exc})") from None
        if len(self.gpus) < self.tp * self.pp:
            raise bad(
                f"tp*pp={self.tp * self.pp} GPUs needed but gpus={self.gpus}",
                "pass enough GPU indices (--perf-gpus 0,1,...) or lower tp/pp",
            )
        if not self.launcher:
            raise bad("launcher is empty", "pass e.g. ('-m', 'sglang.launch_server')")

    # ------------------------------------------------------------------ identity
    @property
    def arm(self) -> dict[str, str]:
        """The variant axes of this spec, as recorded in a RunResult."""
        arm = {"transport": self.mm_feature_transport, "tp": str(self.tp), "pp": str(self.pp)}
        if self.mm_feature_transport == "cpu":
            arm["copy"] = self.copy
        else:
            arm["ipc_cache"] = self.ipc_cache
        if self.pp > 1:
            arm["pp_mb"] = str(self.pp_max_micro_batch_size)
        if self.max_running_requests is not None:
            arm["max_running"] = str(self.max_running_requests)
        if self.cpu_quota is not None:
            arm["quota"] = quota_text(self.cpu_quota)
        if self.role_cpus is not None:  # a pool of pinned roles is not one of unpinned ones (absent: keys unchanged)
            arm["role_cpus"] = "on"
        return arm

    @property
    def key(self) -> str:
        """Stable hash of every field of the spec, the quota included (what one measurement ran under)."""
        return self._hash(())

    @property
    def launch_key(self) -> str:
        """Stable hash of what the engine is launched with: every field but the CPU quota, which the factory
        rewrites on a live engine's cgroup (engines are reused by this key)."""
        return self._hash(("cpu_quota",))

    def _hash(self, leave_out: tuple[str, ...]) -> str:
        data = {k: v for k, v in asdict(self).items() if k != "meta" and k not in leave_out}
        blob = json.dumps(data, sort_keys=True, default=str)
        return self.name + "-" + hashlib.sha256(blob.encode()).hexdigest()[:12]

    # ------------------------------------------------------------------ launch
    def argv(self, python: str, port: int, version: str | None = None) -> list[str]:
        """The full command line. ``version`` is the installed SGLang version (None: unknown/stub)."""
        ver = sglang_version.parse(version)
        a = [
            python,
            *self.launcher,
            "--model-path",
            str(self.model),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--load-format",
            self.load_format,
            "--tp-size",
            str(self.tp),
            "--pp-size",
            str(self.pp),
            "--mem-fraction-static",
            f"{self.mem_fraction_static:g}",
            "--attention-backend",
            self.attention_backend,
            "--mm-attention-backend",
            self.mm_attention_backend,
            "--sampling-backend",
            self.sampling_backend,
            "--grammar-backend",
            self.grammar_backend,
            "--mm-feature-transport",
            self.mm_feature_transport,
        ]
        if self.pp_max_micro_batch_size != "auto":
            a += ["--pp-max-micro-batch-size", str(self.pp_max_micro_batch_size)]
        if self.pp_async_batch_depth:
            a += ["--pp-async-batch-depth", str(self.pp_async_batch_depth)]
        if self.max_running_requests is not None:
            a += ["--max-running-requests", str(self.max_running_requests)]
        if self.kv_tokens is not None:
            a += ["--max-total-tokens", str(self.kv_tokens)]
        if not self.radix_cache:
            a.append("--disable-radix-cache")
        if sglang_version.has_preprocess_cache_flag(ver):
            a += ["--mm-preprocess-cache-size-mb", "0"]
        if self.enable_metrics:
            a.append("--enable-metrics")
        return [*a, *self.extra_args]

    def env(self, version: str | None = None) -> dict[str, str]:
        """Variables to add to the curated environment (arms, caches, offline, visible GPUs)."""
        del version  # both values are set explicitly, so the version's default never matters
        e = {
            "SGLANG_VLM_CACHE_SIZE_MB": str(self.vlm_cache_mb),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1",
            "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in self.gpus),
            "PERF_ARMS_COPY": self.copy,
            "PERF_ARMS_IPC_CACHE": self.ipc_cache,
            "PERF_ARMS_TRANSPORT": self.mm_feature_transport,
        }
        if self.ipc_cache != "stock":  # stock: the release's own default decides (off in 0.5.16, on from 0.5.17)
            e["SGLANG_USE_IPC_POOL_HANDLE_CACHE"] = "1" if self.ipc_cache == "on" else "0"
        e.update(dict(self.env_extra))
        return e

    def with_(self, **changes: object) -> EngineSpec:
        """A copy with some fields changed (validated again)."""
        from dataclasses import replace

        return replace(self, **changes)  # type: ignore[arg-type]


def with_quota_setting(spec: EngineSpec, setting: QuotaSetting, source: str) -> EngineSpec:
    """``--perf-cpu-quota`` (``quota.QuotaSetting``) on an engine's spec: ``auto`` keeps the arm's quota, a number
    replaces it; a quota arm that the setting disables (``none``) is ``NotApplicable`` (never run without its quota
    and reported as if it had one)."""
    reason = setting.skip_reason(spec.cpu_quota, source)
    if reason is not None:
        raise NotApplicable(reason)
    cores = setting.applied(spec.cpu_quota)
    return spec if cores == spec.cpu_quota else spec.with_(cpu_quota=cores)

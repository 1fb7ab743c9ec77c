"""One engine, many arms, declared: ``LiveGroup`` (the launch and its arms), ``Arm`` and ``Contrast``.

A group is one engine launch (``engine``: transport, model, parallelism, the load's concurrency and image size,
and the quota every arm gets unless it names its own) and the arms switched live on it (``Arm``: the copy path,
the IPC pool-handle cache, the tokenizer manager's thread cap, named patches, the CPU quota). The runner
(``scenarios.live_runs``) serves the arms in mirrored blocks on that one engine and proves each visit;
``Contrast`` declares what two arms must satisfy: ``candidate >= bound x reference`` in every judged metric
family (throughput, TTFT and TPOT, the CPU per request of the role the arms differ in, GPU utilisation), judged
from the per-block effects (``judge.paired.judge_contrast``). A contrast that a released SGLang is known to break
is declared on its test with ``known_regression(...)``, as the invariants are.

Each arm's windows are also a result of their own, filed under ``LiveGroup.key(spec, arm)`` (the engine's key with
the live axes and ``/live``): a pool of such runs catches drift on one host over time; it is never what a fresh
runner's verdict rests on.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace

from engine_fixtures.engine.spec import EngineSpec
from engine_fixtures.errors import ConfigError
from engine_fixtures.loadgen.workload import IMAGE_CONTENTS
from engine_fixtures.quota import declared_cores
from engine_fixtures.scenarios.engine import EngineScenario, graph_bucket
from engine_fixtures.transport.live import LiveArm

INHERIT = "group"  # an arm's quota: the group's engine quota
ROLE_FAMILY = "cpu_s_per_request.<role>"
# The families a contrast gates on, each by its window statistic with the smallest per-block spread (TPOT: the
# geometric mean of per-request TPOT; TTFT: the median, which stayed the quietest once the warm-up ends with its
# in-flight wave; docs/results/estimators-2026-12-03), and the figures users read, shown beside them, never gating.
FAMILIES: tuple[str, ...] = ("requests_per_s", "ttft_p50_ms", "tpot_gmean_ms", ROLE_FAMILY, "gpu_util_mean",
                              "tpot_p50_ms")
# Measured and shown with their interval in every contrast, never gating, and why (a contrast adds its own).
REPORTED_WHY: Mapping[str, str] = {
    "tpot_p50_ms": "the TPOT figure users read; TPOT gates on its geometric mean over the requests, 3-5x quieter per "
                   "block (TPOT is bimodal per lockstep wave)",
    "gpu_util_mean": "NVML's utilisation is a coarse duty-cycle counter: its per-block sd of 3-5 points cannot resolve "
                     "the 5-point ceiling in a nightly's blocks (catches 12-15 points at 8 blocks, H200 2026-12-02); a "
                     "CPU-side slowdown that idles the GPU shows in req/s and TTFT, which gate",
}
REPORTED: tuple[str, ...] = tuple(REPORTED_WHY)
QUOTA_THREADS = "quota"  # Arm.threads: the arm's CPU quota in whole cores (at least 1), resolved when it is applied
# The roles whose CPU an axis changes (SGLang's processes by title): the copy and its threads run in the
# tokenizer manager (the HTTP server process), the IPC cache opens handles in the scheduler.
PATCH_ROLES: Mapping[str, str] = {"slow-scheduler": "scheduler", "slow-tokenizer": "http_server"}


@dataclass(frozen=True)
class Arm:
    name: str
    copy: str = "stock"
    ipc_cache: str = "stock"
    threads: int | str | None = None  # None: as launched; QUOTA_THREADS: the arm's quota in whole cores
    patches: tuple[tuple[str, float], ...] = ()
    quota: str | float | None = INHERIT
    # The load, switched live like the rest (the client's, never the engine's): None is the group engine's own.
    concurrency: int | None = None
    image_px: int | None = None
    image_content: str | None = None  # "repeated": one image in every request (the seed's resolution figure)
    # A measured row, not a side of a contrast: served in the first ``blocks`` blocks only (its level with an
    # interval over those blocks); None: every block the group measures.
    blocks: int | None = None

    def __post_init__(self) -> None:
        if not self.name or "/" in self.name:
            raise ConfigError(f"arm name {self.name!r}: a non-empty name without '/'")
        for what, v in (("concurrency", self.concurrency), ("image_px", self.image_px), ("blocks", self.blocks)):
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                raise ConfigError(f"arm {self.name}: {what}={v!r}, an integer >= 1 (or None)")
        if self.blocks == 1:
            raise ConfigError(f"arm {self.name}: blocks=1 gives a level without an interval; measure 2 or more")
        if self.image_content is not None and self.image_content not in IMAGE_CONTENTS:
            raise ConfigError(f"arm {self.name}: image_content={self.image_content!r}, one of "
                              f"{', '.join(IMAGE_CONTENTS)}")
        if isinstance(self.threads, str) and self.threads != QUOTA_THREADS:
            raise ConfigError(f"arm {self.name}: threads={self.threads!r}: an int >= 1, None (as launched) or "
                              f"{QUOTA_THREADS!r} (the arm's CPU quota in whole cores)")
        try:
            LiveArm(self.copy, self.ipc_cache, None if self.threads == QUOTA_THREADS else self.threads,  # type: ignore[arg-type]
                    self.patches)
        except ValueError as exc:
            raise ConfigError(f"arm {self.name}: {exc}") from None

    def live(self) -> LiveArm:
        if self.threads == QUOTA_THREADS:
            raise ConfigError(f"arm {self.name}: threads={QUOTA_THREADS!r} is resolved against the applied quota "
                              "first (Arm.resolved)")
        return LiveArm(self.copy, self.ipc_cache, self.threads, self.patches)  # type: ignore[arg-type]

    @property
    def patch_ms(self) -> dict[str, float]:
        """The named patches and their milliseconds (what ``LiveArm.patch_ms`` reads, without resolving the arm)."""
        return {str(n): float(ms) for n, ms in self.patches}

    def resolved(self, cores: float | None) -> Arm:
        """This arm with ``threads=QUOTA_THREADS`` made concrete for its applied quota of ``cores``: the cap that
        stops the idle intra-op threads from spinning the quota away is the quota's whole cores (the seed's
        ``OMP_NUM_THREADS=8`` was below its host's quota; on the H200's 4-core quota 8 threads still spin)."""
        if self.threads != QUOTA_THREADS:
            return self
        if cores is None:
            raise ConfigError(f"arm {self.name}: threads={QUOTA_THREADS!r} needs a CPU quota, and this arm runs "
                              "without one (--perf-cpu-quota none?); give it a number of threads instead")
        return replace(self, threads=max(1, int(cores)))

    def scenario(self, engine: EngineScenario) -> EngineScenario:
        """The group engine's scenario with this arm's load (what its windows are measured and keyed under)."""
        load = {k: v for k, v in (("concurrency", self.concurrency), ("image_px", self.image_px),
                                  ("image_content", self.image_content)) if v is not None}
        return replace(engine, **load) if load else engine

    def cores(self, group_quota: float | None) -> float | None:
        """This arm's CPU quota in cores (the group's unless the arm names its own)."""
        if self.quota == INHERIT:
            return group_quota
        return declared_cores(self.quota, f"arm {self.name} quota")


@dataclass(frozen=True)
class Contrast:
    """``candidate >= bound x reference`` in each metric of ``metrics`` (the good direction of each), for two arms of
    one group. ``bound`` 1.0 reads "no worse"; 0.9 lets the candidate lose up to 10 % before it is flagged."""

    label: str
    reference: str
    candidate: str
    bound: float = 1.0
    metrics: tuple[str, ...] = FAMILIES
    why: str = ""  # what the contrast guards and why its bound is right (shown with its verdicts)
    report: tuple[str, ...] = REPORTED  # measured and shown with their interval, never gating (say why in ``why``)

    def __post_init__(self) -> None:
        if not set(self.metrics) - set(self.report):
            raise ConfigError(f"contrast {self.label!r}: every metric of {list(self.metrics)} is reported (report="
                              f"{list(self.report)}), so nothing gates it; name a gating metric (TPOT gates as "
                              "tpot_gmean_ms) or pass report=()")

    @property
    def id(self) -> str:
        return self.label.replace(" ", "-")


@dataclass(frozen=True)
class LiveGroup:
    id: str
    engine: EngineScenario
    arms: tuple[Arm, ...]
    contrasts: tuple[Contrast, ...] = field(default=())

    def __post_init__(self) -> None:
        names = [a.name for a in self.arms]
        if len(names) < 2 or len(set(names)) != len(names):
            raise ConfigError(f"live group {self.id}: needs two or more arms with distinct names, got {names}")
        for c in self.contrasts:
            for who in (c.reference, c.candidate):
                if who not in names:
                    raise ConfigError(f"live group {self.id}: contrast {c.label!r} names arm {who!r}; arms are "
                                      f"{', '.join(names)}")
        contrasted = {n for c in self.contrasts for n in (c.reference, c.candidate)}
        bucket = graph_bucket(self.engine.concurrency)
        for a in self.arms:
            if a.blocks is not None and a.name in contrasted:
                raise ConfigError(f"live group {self.id}: arm {a.name} is measured in {a.blocks} blocks only (a "
                                  "measured row); a contrast needs arms served in every block")
            if a.concurrency is not None and a.concurrency > bucket:
                raise ConfigError(f"live group {self.id}: arm {a.name} loads at concurrency {a.concurrency}, above "
                                  f"the engine's CUDA-graph bucket {bucket}; raise the group engine's concurrency")
            if self.engine.transport != "cpu" and (a.copy != "stock" or a.threads is not None):
                raise ConfigError(f"live group {self.id}: arm {a.name} switches the SHM copy, but the engine's "
                                  f"transport is {self.engine.transport}; put it in a group with transport='cpu'")
            if self.engine.transport != "cuda_ipc" and a.ipc_cache != "stock":
                raise ConfigError(f"live group {self.id}: arm {a.name} switches the IPC cache, but the engine's "
                                  f"transport is {self.engine.transport}; put it in a group with transport='cuda_ipc'")

    def order(self, names: list[str], block: int, open_labels: Collection[str] | None = None) -> list[str]:
        """The arms of ``names`` served in ``block``: a measured row only in its first ``blocks``; an arm of contrasts
        only while one of them is open (``open_labels``: the labels of the contrasts still undecided at the last look;
        None before the first look), so an arm whose known regression is already flagged, or whose contrasts are
        decided, stops costing blocks. An arm in no contrast (a pool-only arm) is served in every block."""
        needed = None if open_labels is None else {
            n for c in self.contrasts if c.label in open_labels for n in (c.reference, c.candidate)}
        contrasted = {n for c in self.contrasts for n in (c.reference, c.candidate)}
        return [n for n in names if ((b := self.arm(n).blocks) is None or block < b)
                and (needed is None or n not in contrasted or n in needed)]

    def resolved(self, cores_of: Callable[[Arm], float | None]) -> LiveGroup:
        """The group with every arm's ``threads=QUOTA_THREADS`` made concrete (``Arm.resolved``) for the quota
        ``cores_of(arm)`` it is served under."""
        return replace(self, arms=tuple(a.resolved(cores_of(a)) for a in self.arms))

    @property
    def row_blocks(self) -> int | None:
        """A group of measured rows only (every arm ``blocks=``, no contrast): the blocks it measures, no more."""
        if self.contrasts or any(a.blocks is None for a in self.arms):
            return None
        return max(a.blocks or 0 for a in self.arms)

    @property
    def peak_concurrency(self) -> int:
        return max(a.concurrency or self.engine.concurrency for a in self.arms)

    def arm(self, name: str) -> Arm:
        for a in self.arms:
            if a.name == name:
                return a
        raise ConfigError(f"live group {self.id} has no arm {name!r}: it has {', '.join(a.name for a in self.arms)}")

    def contrast(self, label: str) -> Contrast:
        for c in self.contrasts:
            if c.label == label:
                return c
        raise ConfigError(f"live group {self.id} has no contrast {label!r}")

    def families(self, contrast: Contrast) -> tuple[str, ...]:
        """The contrast's metrics, ``cpu_s_per_request.<role>`` resolved to the roles its two arms differ in."""
        ref, cand = self.arm(contrast.reference), self.arm(contrast.candidate)
        roles: list[str] = []
        if ref.copy != cand.copy or ref.threads != cand.threads:
            roles.append("http_server")
        if ref.ipc_cache != cand.ipc_cache:
            roles.append("scheduler")
        for name in sorted(set(ref.patch_ms) | set(cand.patch_ms)):
            if ref.patch_ms.get(name) != cand.patch_ms.get(name):
                roles.append(PATCH_ROLES.get(name, "http_server"))
        out: list[str] = []
        for m in contrast.metrics:
            names = [f"cpu_s_per_request.{r}" for r in dict.fromkeys(roles)] if m == ROLE_FAMILY else [m]
            out += [n for n in names if n not in out]
        return tuple(out)

    @staticmethod
    def key(spec: EngineSpec, scenario: EngineScenario, arm: Arm, cores: float | None) -> str:
        """The arm's storage key: the engine key of its live axes and quota, the thread cap and patches, ``/live``."""
        live = spec.with_(copy=arm.copy if spec.mm_feature_transport == "cpu" else "stock",
                          ipc_cache=arm.ipc_cache if spec.mm_feature_transport == "cuda_ipc" else "stock",
                          cpu_quota=cores)
        base = EngineScenario.key(live, arm.scenario(scenario))
        extra = "" if arm.threads is None else f"/threads={arm.threads}"
        extra += "".join(f"/{n}={ms:g}" for n, ms in arm.live().patches)
        head, _, load = base.rpartition("/model=")
        return f"{head}{extra}/model={load}/live"

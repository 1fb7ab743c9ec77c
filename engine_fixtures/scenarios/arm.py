"""``Arm``: one arm of a ``Group`` (``scenarios.group``), a live arm of the group's launch or a launch of its own.

A **live arm** switches the copy path, the IPC pool-handle cache, the tokenizer manager's thread cap, named patches,
the CPU quota and the load on the group's one engine between visits, proved at every visit; a **launch of its own**
(``Arm(launch=EngineScenario(...), build=...)``) is what cannot switch live, the transport or the build. A launch
arm is served as launched, unless it names an ``engine`` (arms naming one engine share it, one per replica) or a
live axis (copy, cache, threads, patches, quota): then those are switched live on its engine at every visit and
proved, as on a live group's engine (the A/B of two builds serving the arms a user runs, ``Group.ab_of(arms=)``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from engine_fixtures.engine.build import EngineBuild
from engine_fixtures.errors import ConfigError
from engine_fixtures.loadgen.workload import IMAGE_CONTENTS
from engine_fixtures.quota import declared_cores
from engine_fixtures.scenarios.engine import EngineScenario
from engine_fixtures.transport.live import LiveArm

INHERIT = "group"  # an arm's quota: the group's engine quota
QUOTA_THREADS = "quota"  # Arm.threads: the arm's CPU quota in whole cores (at least 1), resolved when it is applied


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
    # A launch of its own (served as launched, nothing switched live), and its build (None: --perf-candidate).
    launch: EngineScenario | None = None
    build: EngineBuild | None = None
    # A launch arm's engine: arms that name one share it (same launch and build), their live axes switched per visit.
    engine: str | None = None

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
        if self.launch is not None and (self.concurrency, self.image_px, self.image_content, self.blocks) != (
                None, None, None, None):
            raise ConfigError(f"arm {self.name} is a launch of its own: launches are compared under one load, so "
                              "declare its load on its EngineScenario, not on the arm")
        if (self.build is not None or self.engine is not None) and self.launch is None:
            raise ConfigError(f"arm {self.name}: a build or an engine is a launch's; give the arm "
                              "launch=EngineScenario(...)")
        if self.engine is not None and (not self.engine or "/" in self.engine or "@" in self.engine):
            raise ConfigError(f"arm {self.name}: engine={self.engine!r}, a non-empty name without '/' or '@'")
        try:
            LiveArm(self.copy, self.ipc_cache, None if self.threads == QUOTA_THREADS else self.threads,  # type: ignore[arg-type]
                    self.patches)
        except ValueError as exc:
            raise ConfigError(f"arm {self.name}: {exc}") from None

    @property
    def switches(self) -> bool:
        """A launch arm switched live on its engine at every visit (it names an engine or a live axis)."""
        return self.launch is not None and (self.engine is not None or replace(
            self, launch=None, build=None, engine=None) != Arm(self.name))

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
        """The scenario this arm's windows are measured and keyed under: its own launch, or the group engine's with
        this arm's load."""
        if self.launch is not None:
            return self.launch
        load = {k: v for k, v in (("concurrency", self.concurrency), ("image_px", self.image_px),
                                  ("image_content", self.image_content)) if v is not None}
        return replace(engine, **load) if load else engine

    def cores(self, group_quota: float | None) -> float | None:
        """This arm's CPU quota in cores (the group's unless the arm names its own)."""
        if self.quota == INHERIT:
            return group_quota
        return declared_cores(self.quota, f"arm {self.name} quota")

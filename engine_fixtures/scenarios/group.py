"""The one declaration of the GPU tier: a ``Group`` of arms and the ``Contrast``s between them.

An ``Arm`` is one of two kinds:

- a **live arm** of the group's launch (``Group.engine``): the copy path, the IPC pool-handle cache, the tokenizer
  manager's thread cap, named patches, the CPU quota and the load, switched live on that one engine between visits
  and proved at every visit;
- a **launch of its own** (``Arm(launch=EngineScenario(...), build=...)``): what cannot switch live, the transport or
  the build (the A/B of two builds, ``Group.ab``), served as launched.

The runner (``scenarios.runner``) serves the arms in mirrored blocks. Arms of one launch share one engine instance,
so the offset between two engine starts cancels and the block is the unit of every contrast; arms of several launches
are started together, one at a time with one KV size (``engine.group``), in fresh instance groups, and the instance
group is the unit. A ``Contrast`` reads ``candidate >= bound x reference`` in each of its metric families
(throughput, TTFT and TPOT, the CPU per request of the role the arms differ in, and any it adds), judged from those
units (``judge.paired.judge_contrast``). A group without contrasts (one launch measured alone: ``Group.launch``) is
judged against this host's pool. A contrast that a released SGLang is known to break is declared on its test with
``known_regression(...)``. ``CounterBound`` is an exact count of one arm against a limit.

A live group may name a **control** arm (``Group.control``): it is served in every block, and every other arm served
in every block also carries ``rel.<m>`` samples for ``REL_METRICS``: per block, the arm over the control measured in
it (``judge.blocks.ratios_by_block``). Levels carry the host's state at the time of the run (H200 2026-12-04: runs
minutes apart differed by 9 % in req/s and 13 % in TTFT while engines alive together agreed within 3-4 %); the
ratio does not, so where it is measured it gates against its own pool instead of the level (``judge.gating``), as the
CPU tier's ``rel.*`` rows do. The control's own levels are still judged against its pool: they are the only rows that
see a change common to every arm.

The CPU tier declares its invariants with the same ``Contrast`` (one metric each, judged per round).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from engine_fixtures.engine.build import EngineBuild
from engine_fixtures.engine.spec import EngineSpec
from engine_fixtures.errors import ConfigError
from engine_fixtures.judge.counters import KINDS as COUNTER_KINDS
from engine_fixtures.judge.families import (
    FAMILIES,
    LIVE_REL_METRICS,
    REPORTED,
    REPORTED_WHY,
    ROLE_FAMILIES,
    ROLE_FAMILY,
    ROLES_BY_AXIS,
    SHARE_FAMILY,
)
from engine_fixtures.scenarios.arm import INHERIT, QUOTA_THREADS, Arm
from engine_fixtures.scenarios.engine import EngineScenario, graph_bucket
from engine_fixtures.sglang_plugin import patches

# Arm lives in scenarios.arm, the families in judge.families
__all__ = ["FAMILIES", "INHERIT", "QUOTA_THREADS", "REL_METRICS", "REPORTED", "REPORTED_WHY", "ROLE_FAMILY",
           "SHARE_FAMILY", "Arm", "Contrast", "CounterBound", "Group"]

# The families' policy lives in ``judge.families`` (re-exported here for declarations: ``from engine_fixtures import
# FAMILIES``).
REL_METRICS = LIVE_REL_METRICS
PATCH_ROLES: Mapping[str, str] = patches.ROLES  # the process each named patch runs in (its target's)
AB_REFERENCE, AB_CANDIDATE = "reference", "candidate"
REPLICA_MARK = "@"  # a member of a group of launches started more than once per instance group: "<arm>@<k>"


@dataclass(frozen=True)
class Contrast:
    """``candidate >= bound x reference`` in each metric of ``metrics`` (the good direction of each), for two arms of
    one group. ``bound`` 1.0 reads "no worse"; 0.9 lets the candidate lose up to 10 % before it is flagged.
    ``bounds``: a family's own bound where the contrast's does not fit it (``(("cpu_share_of_quota.<role>", 0.5),)``:
    the candidate's share of the quota at most 2x the reference's), justified in ``why`` like the contrast's."""

    label: str
    reference: str
    candidate: str
    bound: float = 1.0
    metrics: tuple[str, ...] = FAMILIES
    why: str = ""  # what the contrast guards and why its bound is right (shown with its verdicts)
    report: tuple[str, ...] = REPORTED  # measured and shown with their interval, never gating (say why in ``why``)
    bounds: tuple[tuple[str, float], ...] = ()  # (family, bound): a family's own bound (a role family for its roles)

    def __post_init__(self) -> None:
        for family, bound in ((None, self.bound), *self.bounds):
            if not bound > 0:
                raise ConfigError(f"contrast {self.label!r}: bound{f' of {family}' if family else ''} must be > 0, "
                                  f"got {bound}")
        strays = [f for f, _ in self.bounds if f not in self.metrics]
        if strays:
            raise ConfigError(f"contrast {self.label!r}: bounds name {strays}, which are not among its metrics "
                              f"{list(self.metrics)}")
        if not set(self.metrics) - set(self.report):
            raise ConfigError(f"contrast {self.label!r}: every metric of {list(self.metrics)} is reported (report="
                              f"{list(self.report)}), so nothing gates it; name a gating metric (TPOT gates as "
                              "tpot_gmean_ms) or pass report=()")

    @property
    def id(self) -> str:
        return self.label.replace(" ", "-")

    def bound_of(self, name: str) -> float:
        """The bound a metric of this contrast is judged against (``cpu_share_of_quota.http_server`` takes the bound
        declared for ``cpu_share_of_quota.<role>``)."""
        prefix, dot, _ = name.partition(".")
        own = dict(self.bounds)
        return own.get(name, own.get(f"{prefix}.<role>", self.bound) if dot else self.bound)


@dataclass(frozen=True)
class CounterBound:
    """An exact count of one arm against a limit, no statistics: ``at_most`` every value stays at or below it
    (IPC handle opens per image with the pool-handle cache: ~0, never ~1); ``at_least`` the peak over the
    values reaches it (the largest batch the scheduler ran reaches min(concurrency, max_running_requests) when no
    hidden cap holds it). Both are per-segment metrics: one value per measured segment (visit), not per window."""

    label: str
    metric: str
    arm: str
    limit: float
    why: str = ""
    kind: str = "at_most"

    def __post_init__(self) -> None:
        if self.kind not in COUNTER_KINDS:
            raise ConfigError(f"CounterBound kind {self.kind!r}: use one of {', '.join(COUNTER_KINDS)}")

    @property
    def id(self) -> str:
        return self.label.replace(" ", "-")


@dataclass(frozen=True)
class Group:
    """Arms served in mirrored blocks and the contrasts between them. ``engine``: the launch its live arms switch on
    (None when every arm is a launch of its own). ``ab``: the A/B of two builds, judged over its launch's gating
    metrics (``judge.gating``) instead of the contrast's families."""

    id: str
    engine: EngineScenario | None = None
    arms: tuple[Arm, ...] = ()
    contrasts: tuple[Contrast, ...] = field(default=())
    ab: bool = False
    control: str | None = None  # a live arm the others are also measured against, per block (``rel.*``)
    # Launches only: engines of each arm alive together in every instance group (``members``); two or more give
    # every run same-launch pairs, null units for this host's A/A history (``scenarios.nulls``).
    replicas: int = 1

    def __post_init__(self) -> None:
        names = [a.name for a in self.arms]
        if not names or len(set(names)) != len(names):
            raise ConfigError(f"group {self.id}: needs arms with distinct names, got {names}")
        if any(REPLICA_MARK in n for n in names):
            raise ConfigError(f"group {self.id}: arm names may not contain {REPLICA_MARK!r} (it marks a replica)")
        if not isinstance(self.replicas, int) or self.replicas < 1 or (self.replicas > 1 and self.live):
            raise ConfigError(f"group {self.id}: replicas={self.replicas!r}: an integer >= 1, and 1 for arms "
                              "switched live on one engine (a replica is a launch of its own)")
        if self.control is not None and (self.control not in names or self.arms[0].launch is not None
                                         or self.arm(self.control).blocks is not None):
            raise ConfigError(f"group {self.id}: control {self.control!r} must be one of its live arms served in every "
                              f"block (arms: {', '.join(names)})")
        if len(names) < 2 and self.contrasts:
            raise ConfigError(f"group {self.id}: a contrast needs two arms")
        for c in self.contrasts:
            for who in (c.reference, c.candidate):
                if who not in names:
                    raise ConfigError(f"group {self.id}: contrast {c.label!r} names arm {who!r}; arms are "
                                      f"{', '.join(names)}")
        live = [a for a in self.arms if a.launch is None]
        if live and self.engine is None:
            raise ConfigError(f"group {self.id}: arm {live[0].name} switches live, so the group needs engine="
                              "EngineScenario(...) to switch it on (or give the arm a launch of its own)")
        if live and len(live) != len(names):
            raise ConfigError(f"group {self.id}: arms switched live on one engine and launches of their own are two "
                              "groups; declare them apart")
        if not live:
            loads = {(a.launch.concurrency, a.launch.image_px, a.launch.output_tokens) for a in self.arms}  # type: ignore[union-attr]
            if len(loads) > 1:
                raise ConfigError(f"group {self.id}: launches are compared under one load; they declare "
                                  f"(concurrency, image px, output tokens) {sorted(loads)}")
        self._check_live(live)
        self._check_engines()

    def _check_live(self, live: Sequence[Arm]) -> None:
        if not live or self.engine is None:
            return
        contrasted = {n for c in self.contrasts for n in (c.reference, c.candidate)}
        bucket = graph_bucket(self.engine.concurrency)
        for a in live:
            if a.blocks is not None and a.name in contrasted:
                raise ConfigError(f"group {self.id}: arm {a.name} is measured in {a.blocks} blocks only (a "
                                  "measured row); a contrast needs arms served in every block")
            if a.concurrency is not None and a.concurrency > bucket:
                raise ConfigError(f"group {self.id}: arm {a.name} loads at concurrency {a.concurrency}, above "
                                  f"the engine's CUDA-graph bucket {bucket}; raise the group engine's concurrency")
            self._check_transport(a, self.engine)

    def _check_transport(self, a: Arm, engine: EngineScenario) -> None:
        if engine.transport != "cpu" and (a.copy != "stock" or a.threads is not None):
            raise ConfigError(f"group {self.id}: arm {a.name} switches the SHM copy, but the engine's "
                              f"transport is {engine.transport}; put it in a group with transport='cpu'")
        if engine.transport != "cuda_ipc" and a.ipc_cache != "stock":
            raise ConfigError(f"group {self.id}: arm {a.name} switches the IPC cache, but the engine's "
                              f"transport is {engine.transport}; put it in a group with transport='cuda_ipc'")

    def _check_engines(self) -> None:
        """Launch arms naming one engine share one launch and one build; a switched arm's axes fit its transport."""
        seen: dict[str, Arm] = {}
        for a in self.arms:
            if a.launch is None:
                continue
            if a.switches:
                self._check_transport(a, a.launch)
            first = seen.setdefault(self.engine_name(a.name), a)
            if (first.launch, first.build) != (a.launch, a.build):
                raise ConfigError(f"group {self.id}: arms {first.name} and {a.name} share engine "
                                  f"{self.engine_name(a.name)!r} but not their launch and build")

    @classmethod
    def launch(cls, scenario: EngineScenario) -> Group:
        """One launch measured alone, judged against this host's pool."""
        return cls(scenario.id, arms=(Arm(scenario.id, launch=scenario),))

    @classmethod
    def ab_of(cls, scenario: EngineScenario, reference: EngineBuild, candidate: EngineBuild,
              metrics: Sequence[str] = FAMILIES, arms: Sequence[Arm] = ()) -> Group:
        """The A/B of two builds of one launch (``--perf-reference``). With ``arms`` (live arms: copy, cache, threads,
        quota), each build's engine serves every one of them, switched live at each visit as the nightly does, and
        each arm is its own contrast of the two builds (arms ``reference.<arm>``, ``candidate.<arm>``; the label
        ``<arm>: candidate vs reference``)."""
        why = "the A/B: the candidate build is no slower than the reference"
        if not arms:
            return cls(f"ab/{scenario.id}", arms=(Arm(AB_REFERENCE, launch=scenario, build=reference),
                                                  Arm(AB_CANDIDATE, launch=scenario, build=candidate)),
                       contrasts=(Contrast("candidate vs reference", AB_REFERENCE, AB_CANDIDATE, 1.0,
                                           tuple(metrics), why=why),), ab=True)
        sides = ((AB_REFERENCE, reference), (AB_CANDIDATE, candidate))
        if any(a.launch is not None or a.concurrency or a.image_px or a.image_content or a.blocks for a in arms):
            raise ConfigError(f"ab/{scenario.id}: the A/B's arms switch live axes only (copy, cache, threads, quota, "
                              "patches); its load and launch are the scenario's")
        return cls(f"ab/{scenario.id}",
                   arms=tuple(replace(a, name=f"{side}.{a.name}", launch=scenario, build=build, engine=side)
                              for a in arms for side, build in sides),
                   contrasts=tuple(Contrast(f"{a.name}: candidate vs reference", f"{AB_REFERENCE}.{a.name}",
                                            f"{AB_CANDIDATE}.{a.name}", 1.0, tuple(metrics), why=f"{why} ({a.name})")
                                   for a in arms), ab=True)

    def side(self, arm: str) -> str:
        """The A/B's side of an arm: ``reference`` or ``candidate``."""
        return arm.split(".", 1)[0]

    @property
    def live(self) -> bool:
        """Its arms switch live on one engine (else each is a launch of its own)."""
        return self.arms[0].launch is None

    @property
    def separate(self) -> bool:
        """Several launches: the unit of its contrasts is the fresh instance group, not the block."""
        return not self.live and len(self.arms) > 1

    def order(self, names: list[str], block: int, open_labels: Collection[str] | None = None) -> list[str]:
        """The members of ``names`` served in ``block``: a measured row only in its first ``blocks``; an arm of
        contrasts only while one of them is open (``open_labels``: the labels of the contrasts still undecided at the
        last look; None before the first look), so an arm whose known regression is already flagged, or whose
        contrasts are decided, stops costing blocks. An arm in no contrast (a pool-only arm) and the control are
        served in every block."""
        needed = None if open_labels is None else {
            n for c in self.contrasts if c.label in open_labels for n in (c.reference, c.candidate)}
        contrasted = {n for c in self.contrasts for n in (c.reference, c.candidate)} - {self.control}
        return [n for n in names if ((b := self.arm_of(n).blocks) is None or block < b)
                and (needed is None or (arm := self.arm_of(n).name) not in contrasted or arm in needed)]

    @property
    def members(self) -> tuple[str, ...]:
        """What the blocks serve: every arm, each ``replicas`` times (``<arm>@1``, ``<arm>@2``, ...; with one
        replica the arm's own name)."""
        return tuple(m for a in self.arms for m in self.members_of(a.name))

    def members_of(self, arm: str) -> tuple[str, ...]:
        if self.replicas == 1:
            return (arm,)
        return tuple(f"{arm}{REPLICA_MARK}{k}" for k in range(1, self.replicas + 1))

    def engine_name(self, arm: str) -> str:
        """The engine a launch arm is served on: the one it names (shared), else its own."""
        return self.arm(arm).engine or arm

    def engine_of(self, member: str) -> str:
        """The engine a member is served on (one per engine and replica): ``<engine>`` or ``<engine>@<k>``."""
        arm, mark, k = member.partition(REPLICA_MARK)
        return f"{self.engine_name(arm)}{mark}{k}"

    @property
    def engines(self) -> tuple[str, ...]:
        """The engines of a group of launches, one per engine and replica, in the order of their first member."""
        return tuple(dict.fromkeys(self.engine_of(m) for m in self.members))

    @property
    def switched(self) -> bool:
        """A group of launches whose arms are switched live on their engines at every visit (``Arm.switches``)."""
        return not self.live and any(a.switches for a in self.arms)

    def arm_of(self, member: str) -> Arm:
        """The arm a member serves."""
        return self.arm(member.split(REPLICA_MARK, 1)[0])

    def member_pairs(self, a: str, b: str) -> list[tuple[str, str]]:
        """Arms ``a`` and ``b`` as pairs of members served as neighbours: their k-th replicas."""
        return list(zip(self.members_of(a), self.members_of(b), strict=True))

    def with_replicas(self, replicas: int) -> Group:
        """A group of launches started ``replicas`` times per instance group (a live group stays as it is)."""
        return replace(self, replicas=replicas) if self.separate else self

    def resolved(self, cores_of: Callable[[Arm], float | None]) -> Group:
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
        return max(a.scenario(self.engine).concurrency for a in self.arms)  # type: ignore[arg-type]

    @property
    def rel_arms(self) -> tuple[str, ...]:
        """The arms measured against the control (``rel.*``): every other arm served in every block."""
        if self.control is None:
            return ()
        return tuple(a.name for a in self.arms if a.name != self.control and a.blocks is None)

    def scenario_of(self, arm: Arm) -> EngineScenario:
        return arm.scenario(self.engine)  # type: ignore[arg-type]

    def arm(self, name: str) -> Arm:
        for a in self.arms:
            if a.name == name:
                return a
        raise ConfigError(f"group {self.id} has no arm {name!r}: it has {', '.join(a.name for a in self.arms)}")

    def contrast(self, label: str) -> Contrast:
        for c in self.contrasts:
            if c.label == label:
                return c
        raise ConfigError(f"group {self.id} has no contrast {label!r}")

    def families(self, contrast: Contrast) -> tuple[str, ...]:
        """The contrast's metrics, each role family resolved to the roles its two arms differ in (the copy
        and its threads run in the tokenizer manager, the IPC handles open in the scheduler, a build changes either,
        a named patch runs where ``PATCH_ROLES`` says)."""
        ref, cand = self.arm(contrast.reference), self.arm(contrast.candidate)
        rs, cs = self.scenario_of(ref), self.scenario_of(cand)
        roles: list[str] = []
        if (rs.transport, rs.copy, ref.copy, ref.threads) != (cs.transport, cs.copy, cand.copy, cand.threads):
            roles += ROLES_BY_AXIS["copy"]
        if (rs.transport, rs.ipc_cache, ref.ipc_cache) != (cs.transport, cs.ipc_cache, cand.ipc_cache):
            roles += ROLES_BY_AXIS["ipc_cache"]
        for name in sorted(set(ref.patch_ms) | set(cand.patch_ms)):
            if ref.patch_ms.get(name) != cand.patch_ms.get(name):
                roles.append(PATCH_ROLES.get(name, "http_server"))
        if ref.build != cand.build:
            roles += ROLES_BY_AXIS["transport"]  # a build changes either end
        out: list[str] = []
        for m in contrast.metrics:
            names = ([m.replace("<role>", r) for r in dict.fromkeys(roles)] if m in ROLE_FAMILIES else [m])
            out += [n for n in names if n not in out]
        return tuple(out)

    def key(self, spec: EngineSpec, arm: Arm, cores: float | None) -> str:
        """The arm's storage key. A live arm: the engine key of its live axes and quota, the thread cap and patches,
        ``/live``. A launch: its engine key, plus ``/group=<id>`` in a group of launches (``/build=reference`` for
        the A/B's reference; the candidate and a launch measured alone keep the launch's own key)."""
        if arm.launch is not None and not arm.switches:
            base = EngineScenario.key(spec, arm.launch)
            if self.ab:
                return base + ("/build=reference" if self.side(arm.name) == AB_REFERENCE else "")
            return base + (f"/group={self.id}" if self.separate else "")
        live = spec.with_(copy=arm.copy if spec.mm_feature_transport == "cpu" else "stock",
                          ipc_cache=arm.ipc_cache if spec.mm_feature_transport == "cuda_ipc" else "stock",
                          cpu_quota=cores)
        base = EngineScenario.key(live, self.scenario_of(arm))
        if arm.launch is not None:  # switched on its launch: its live axes, then the A/B's side or the group
            extra = "" if arm.threads is None else f"/threads={arm.threads}"
            extra += "".join(f"/{n}={ms:g}" for n, ms in arm.live().patches)
            if self.ab:
                return base + extra + ("/build=reference" if self.side(arm.name) == AB_REFERENCE else "")
            return base + extra + f"/group={self.id}"
        extra = "" if arm.threads is None else f"/threads={arm.threads}"
        extra += "".join(f"/{n}={ms:g}" for n, ms in arm.live().patches)
        head, _, load = base.rpartition("/model=")
        return f"{head}{extra}/model={load}/live"

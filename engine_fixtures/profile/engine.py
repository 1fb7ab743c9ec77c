"""Entry points for the runners: when to profile, profile one build's roles, and its differentials.

For the GPU tier's engine runner, *after* the verdicts are decided and before ``recorder.conclude`` ends the test
(dedicated windows, so measured windows stay clean); ``explain_ab`` / ``explain_history`` do all of it::

    ps = ProfileSettings.from_settings(settings, workdir)
    where = explain_ab(session.profiles, [scenario_id], statuses, ps,
                       candidate=(cand_handle.pids(), drive_cand), reference=(ref_handle.pids(), drive_ref))
    # history mode: explain_history(session.profiles, [scenario_id], statuses, ps, (handle.pids(), drive),
    #                               session.store.path_for(scenario_id))
    conclude(scenario_id, verdicts, settings.strict, profile=where)

which, spelled out, is::

    if ps.wanted(statuses):                                   # the verdict statuses of this scenario
        cand = profile_engine(engine_roles(cand_root_pid), drive_load_cand, ps, label="candidate")
        ref = profile_engine(engine_roles(ref_root_pid), drive_load_ref, ps, label="reference")
        session.profiles.add([scenario_id], "candidate minus reference", ab_differential(cand, ref),
                             cand.notes + ref.notes)

``drive_load(seconds) -> int`` runs the scenario's load for about ``seconds`` and returns the requests completed
in that time. Nothing here raises for a missing py-spy or a refused attach: the profiles come back empty with a
one-line note, and ``report`` prints it instead of a differential.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from engine_fixtures.isolation import owner
from engine_fixtures.isolation.roles import OTHER, SGLANG_ROLES, Role, discover
from engine_fixtures.options import Settings
from engine_fixtures.profile import record, store
from engine_fixtures.profile.diff import RoleDiff, differential, gpu_side
from engine_fixtures.profile.model import RoleProfiles
from engine_fixtures.profile.report import ProfileBook

MODES = ("on-regression", "always", "off")
NOT_PROFILED = ("resource_tracker", OTHER)  # helpers, not engine roles
DEFAULT_SECONDS = 8.0


@dataclass(frozen=True)
class ProfileSettings:
    """``--perf-profile`` (mode), ``--perf-profile-rate`` (Hz), the window length and where py-spy writes."""

    mode: str = "off"
    rate_hz: float = 100.0
    seconds: float = DEFAULT_SECONDS
    workdir: Path | None = None
    strict: bool = False

    @classmethod
    def from_settings(cls, settings: Settings, workdir: Path | None = None,
                      seconds: float = DEFAULT_SECONDS) -> ProfileSettings:
        mode = settings.profile or ("on-regression" if settings.strict else "off")
        return cls(mode, float(settings.profile_rate), seconds, workdir, bool(settings.strict))

    def wanted(self, statuses: Iterable[str]) -> bool:
        """``always``; ``on-regression``: when a verdict fails the test (a regression; in strict mode also an
        inconclusive or an improvement, which fail it too); never with ``off``."""
        if self.mode == "always":
            return True
        if self.mode != "on-regression":
            return False
        failing = {"regression", "inconclusive", "improvement"} if self.strict else {"regression"}
        return bool(failing & set(statuses))


def engine_roles(root_pid: int, roles: Sequence[Role] = SGLANG_ROLES) -> dict[str, tuple[int, ...]]:
    """The engine's roles by process title (``isolation.roles.discover``), without helpers and empty roles."""
    return {r: pids for r, pids in discover(root_pid, roles).items() if pids and r not in NOT_PROFILED}


def profile_engine(pids_by_role: Mapping[str, Sequence[int]], drive_load: Callable[[float], int],
                   settings: ProfileSettings, label: str = "", subprocesses: Sequence[str] = ()) -> RoleProfiles:
    """Every role's processes profiled in parallel over one ``drive_load(settings.seconds)`` window."""
    if settings.workdir is not None:
        return record.record(pids_by_role, drive_load, rate_hz=settings.rate_hz, seconds=settings.seconds,
                             workdir=settings.workdir / (label or "profile"), label=label, subprocesses=subprocesses)
    with owner.temp_dir("profile") as tmp:
        return record.record(pids_by_role, drive_load, rate_hz=settings.rate_hz, seconds=settings.seconds,
                             workdir=Path(tmp), label=label, subprocesses=subprocesses)


def ab_differential(candidate: RoleProfiles, reference: RoleProfiles) -> list[RoleDiff]:
    """Per role, candidate minus reference CPU-s per request by function, growers first."""
    return differential(candidate, reference)


def history_differential(candidate: RoleProfiles, pool_path: Path) -> tuple[list[RoleDiff], str]:
    """The candidate against the profile stored beside the pool at ``pool_path``; ([], why) where none is kept."""
    stored = store.load_beside(pool_path)
    if stored is None:
        return [], (f"no profile is stored beside {pool_path} yet: a profiled clean run added to the pool "
                    "(`--perf-update-baselines --perf-profile always`) keeps one")
    return differential(candidate, stored), ""


Build = tuple[Mapping[str, Sequence[int]], Callable[[float], int]]  # (pids by role, drive_load)


def explain_ab(book: ProfileBook, keys: Sequence[str], statuses: Iterable[str], settings: ProfileSettings, *,
               candidate: Build, reference: Build) -> str:
    """If ``settings.wanted(statuses)``: profile both builds (candidate first, one window each), add the A/B
    differential to ``book`` under ``keys`` and return its failure text (top 3 per role); else ''."""
    if not settings.wanted(statuses):
        return ""
    cand = profile_engine(*candidate, settings, label="candidate")
    ref = profile_engine(*reference, settings, label="reference")
    diffs = ab_differential(cand, ref)
    side = gpu_side(diffs)
    book.add(keys, "candidate minus reference", diffs, (*((side,) if side else ()), *cand.notes, *ref.notes))
    return book.failure_text(keys)


def explain_history(book: ProfileBook, keys: Sequence[str], statuses: Iterable[str], settings: ProfileSettings,
                    build: Build, pool_path: Path) -> str:
    """If wanted: profile the build, add its differential against the profile stored beside the pool (or the line
    saying none is stored) to ``book``; its failure text, else ''."""
    if not settings.wanted(statuses):
        return ""
    cand = profile_engine(*build, settings, label="candidate")
    diffs, note = history_differential(cand, pool_path)
    book.add(keys, f"this run minus the profile stored beside {pool_path.name}", diffs,
             (*cand.notes, *((note,) if note else ())))
    return book.failure_text(keys)

"""What a run will need, checked at its start, before any engine or producer starts: a setting that cannot work
stops the session as a usage error (exit 4) naming the option, where its value came from and the fix, instead of
ending a run in a traceback after its measurements.

Wiring (plugin.py)::

    preflight.check(settings, machine_key)   # pytest_configure, before the run guard: ConfigError, every problem
    preflight.scan_pools(session)            # pytest_configure, once the session exists: unreadable pools, once
    preflight.before_measuring(config, items)  # pytest_collection_finish: the run history, where the run measures

``check`` creates nothing (also under --collect-only) and finds:
- ``--perf-results-dir``, ``--perf-state-dir``: not a directory, and not one that can be created, or not writable;
- ``--perf-baseline-dir``: no directory of pools can be there (a file in the way); not writable where
  ``--perf-update-baselines`` will write to it;
- ``--perf-inject``: an ARM or an IMPL that is not a CPU-tier copy arm (``cpu_tier.arms.CPU_TIER_ARMS``, listed);
- ``--perf-cgroup-parent``: missing, or not a cgroup directory (``cgroup_mounts.cgroup_dir_problem``: a plain
  directory got a ``perf-probe-*`` directory of quota files that nothing could remove, and an INTERNALERROR).
``--perf-reference`` / ``--perf-candidate`` (patch names, interpreters, paths) are checked where they are parsed
(``engine.build.parse_reference``), at the same moment; ``stored`` is resolved by ``resolve_builds`` right after
``check``: this machine key's stored reference build (``store.reference_build``), or a usage error naming how to
promote one.

``scan_pools`` reads every pool of this machine key (``PerfSession.pool``): an unreadable one (truncated, not JSON,
an unknown format version, a directory in its place) does not stop the run. It is said once, in the report header
(``header_lines``) and in the summary; only the rows that read it fail, everything else is judged.

``before_measuring``: once collection has selected a measured test (``marks.measured``) and it is not
--collect-only, the run history is opened (``--perf-history-url``: form, driver, the SQLite file's directory, then
a connection and the schema check, with the history's own timeouts), so an unknown scheme, a garbage SQLite file,
a read-only location or a server that is down is a usage error before the first test rather than a lost index
after the last. It is not done at configure: the history's libraries cost half a second to import, and a
session that measures nothing writes no history.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from engine_fixtures.cpu_tier.arms import CPU_TIER_ARMS
from engine_fixtures.errors import ConfigError, PerfError
from engine_fixtures.isolation.cgroup_mounts import cgroup_dir_problem
from engine_fixtures.isolation.cgroups import PARENT_FIX
from engine_fixtures.isolation.run_registry import default_state_dir
from engine_fixtures.options import Settings
from engine_fixtures.session import marks
from engine_fixtures.session.perf_session import SESSION_KEY, PerfSession
from engine_fixtures.session.settings import SETTINGS_KEY
from engine_fixtures.store.files import place_problem


def _invalid(settings: Settings, name: str, value: object, problem: str, fix: str) -> str:
    option = "--perf-" + name.replace("_", "-")
    return f"Invalid {option} {str(value)!r} from {settings.sources.get(name, 'default')}: {problem}; {fix}"


def inject_problem(settings: Settings) -> str | None:
    """Why ``--perf-inject`` names something no CPU-tier arm is (an unknown arm was a silent no-op, an unknown copy
    implementation crashed the producer after its start)."""
    inj = settings.inject
    if not inj:
        return None
    parts = [f"unknown arm {arm!r}" for arm in sorted({*inj.slow_ms, *inj.copy}) if arm not in CPU_TIER_ARMS]
    parts += [f"unknown copy implementation {impl!r} (copy:{arm}={impl})" for arm, impl in sorted(inj.copy.items())
              if impl not in CPU_TIER_ARMS]
    if not parts:
        return None
    return _invalid(settings, "inject", inj.describe(), "; ".join(parts),
                    f"the CPU tier's copy arms are {', '.join(CPU_TIER_ARMS)} (slow:ARM=MS, copy:ARM=IMPL)")


def problems(settings: Settings, machine_key: str) -> list[str]:
    """Every setting of ``settings`` this run cannot work with, one line each (see the module docstring)."""
    found = []
    if (why := place_problem(settings.results_dir)) is not None:
        found.append(_invalid(settings, "results_dir", settings.results_dir, why,
                              "pass a directory this user can write (it is created when missing)"))
    state = settings.state_dir or default_state_dir()
    if (why := place_problem(state)) is not None:
        found.append(_invalid(settings, "state_dir", state, why, "pass a writable directory (it holds the machine "
                              "lock and the records of running perf runs)"))
    pools = Path(settings.baseline_dir) / machine_key
    if (why := place_problem(pools, writable=settings.update_baselines)) is not None:
        writes = " this user can write (--perf-update-baselines records into it)" if settings.update_baselines else ""
        found.append(_invalid(settings, "baseline_dir", settings.baseline_dir, why,
                              f"pass a directory{writes}; pools live in DIR/<machine key>/"))
    if (why := inject_problem(settings)) is not None:
        found.append(why)
    parent = settings.cgroup_parent
    if parent is not None and (why := cgroup_dir_problem(parent)) is not None:  # before any sandbox is tried there
        found.append(_invalid(settings, "cgroup_parent", parent, why, PARENT_FIX))
    return found


def check(settings: Settings, machine_key: str) -> None:
    """Raise one ``ConfigError`` naming every problem (``problems``) before anything starts."""
    found = problems(settings, machine_key)
    if len(found) == 1:
        raise ConfigError(f"{found[0]}. Nothing was started.")
    if found:
        raise ConfigError("this run cannot start:\n" + "\n".join(f"  - {p}" for p in found) + "\nNothing was started.")


def kept_reference_absent(settings: Settings, machine_key: str) -> str | None:
    """With ``--perf-reference stored-if-kept``: why the A/B cannot run where this runner keeps no reference build
    (the line the ``ab`` tests skip with, naming how to keep one), else None."""
    from engine_fixtures.engine.build import STORED_IF_KEPT
    from engine_fixtures.store.reference_build import PROMOTE, ReferenceStore

    if settings.reference is None or settings.reference.label != STORED_IF_KEPT:
        return None
    store = ReferenceStore(Path(settings.baseline_dir), machine_key)
    if store.kept():
        return None
    return (f"--perf-reference {STORED_IF_KEPT}: this runner keeps no reference build in {store.dir}, so there is no "
            f"A/B of builds to run; keep the last good build with {PROMOTE} (or --perf-promote after a green nightly), "
            "and the next run judges the installed build against it")


def resolve_builds(settings: Settings, machine_key: str) -> Settings:
    """``settings`` with ``--perf-reference stored`` (and ``--perf-candidate stored``) made the kept build of this
    machine key; ``ConfigError`` naming the fix where none is stored or it is unreadable."""
    from engine_fixtures.engine.build import STORED
    from engine_fixtures.store.reference_build import ReferenceStore

    changed = {}
    for name in ("reference", "candidate"):
        build = getattr(settings, name)
        if build is not None and build.stored:
            try:
                changed[name] = ReferenceStore(Path(settings.baseline_dir), machine_key).build()
            except PerfError as exc:
                raise ConfigError(_invalid(settings, name, STORED, str(exc), "or name the build itself") +
                                  ". Nothing was started.") from None
    return replace(settings, **changed) if changed else settings


def scan_pools(session: PerfSession) -> None:
    """Read every pool of the session's machine key once: an unreadable one is kept in ``session.unreadable``."""
    for scenario in session.store.scenarios():
        session.pool(scenario)


def header_lines(config: pytest.Config) -> list[str]:
    session = config.stash.get(SESSION_KEY, None)
    return [f"perf: unreadable pool: {why}" for why in session.unreadable.values()] if session is not None else []


def before_measuring(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Open the run history once the session will measure (see the module docstring); a usage error if it cannot."""
    if config.option.collectonly or hasattr(config, "workerinput") or not marks.measured(items):
        return
    settings = config.stash[SETTINGS_KEY]
    source = settings.sources.get("history_url", "default")
    try:
        from engine_fixtures.store.history import HistoryStore
    except ImportError as exc:
        raise pytest.UsageError(f"the run history cannot be written: {exc}; reinstall the suite (`pip install -e .`, "
                                "which installs SQLAlchemy, alembic and psycopg). Nothing was measured.") from None
    try:
        store = HistoryStore.open(settings.history_url, settings.results_dir)
        if store is not None:
            store.close()
    except PerfError as exc:
        raise pytest.UsageError(f"{exc} (set by {source}). Nothing was measured.") from None

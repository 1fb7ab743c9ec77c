"""The run's place on its machine (pytest-facing): the sweep at session start, the machine lock, the run record.

Wiring (plugin.py, in ``pytest_configure`` after the settings are stashed)::

    from engine_fixtures.session.run_guard import install_run_guard
    install_run_guard(config)

``install_run_guard`` (not on xdist workers, which belong to their controller's run):
- makes this pytest session a run of its own (``isolation.owner.claim``: the token every child inherits);
- sweeps what dead runs left (``isolation.sweep``) and records this run (``isolation.run_registry``); the
  sweep's one line appears in the report header and among the session's findings (``summary.md``);
- turns SIGTERM into pytest's interrupt path (``isolation.signals.TerminateAsInterrupt``): a cancelled job
  cleans up like Ctrl-C instead of leaving its engines, sandboxes, temp dirs and record to the next run's sweep;
  the old handler is back when the session ends.
Its hooks: after collection, a session with a measured test (``marks.MEASURED``) that is not skipped takes the
machine lock (``isolation.machine_lock``), saying whom it waits for; past ``--perf-lock-timeout`` the session
ends with a usage error naming the holder. At the end the lock is released and the record removed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine_fixtures.engine.factory import ENGINE_SHM_PREFIXES
from engine_fixtures.errors import MachineBusy
from engine_fixtures.isolation import owner, run_registry
from engine_fixtures.isolation.machine_lock import Holder, MachineLock
from engine_fixtures.isolation.signals import TerminateAsInterrupt
from engine_fixtures.isolation.sweep import SweepReport, sweep
from engine_fixtures.options import Settings
from engine_fixtures.session import marks
from engine_fixtures.session.settings import SETTINGS_KEY


class RunGuard:
    """Per-session: the sweep's report, the run record, the machine lock."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self.state = settings.state_dir or run_registry.default_state_dir()
        self.lock = MachineLock(self.state / "lock")
        self.lock_state = ""  # "", "acquired" or "nested"
        self.report = SweepReport()
        self.record: Path | None = None
        self.notes: list[str] = []
        self.terminate = TerminateAsInterrupt()

    def start(self) -> None:
        owner.claim()
        self.terminate.install()
        try:
            run_registry.state_dir(self.state)
        except OSError as exc:  # session.preflight refused an unusable one at start: this one broke since
            self.notes.append(f"perf: no machine state in {self.state} ({exc.strerror}): the sweep cannot see "
                              f"killed runs' records; pass a writable --perf-state-dir")
        roots = (self.settings.cgroup_parent,) if self.settings.cgroup_parent is not None else ()
        self.report = sweep(self.settings.results_dir, self.state, ENGINE_SHM_PREFIXES, roots)
        if self.notes:  # no state dir: this run cannot be recorded there either
            return
        self.record, why = run_registry.register(self.state, self.settings.results_dir)
        if why:
            self.notes.append(f"perf: {why}")

    def lines(self) -> list[str]:
        return [line for line in (self.report.line(), *self.notes) if line]

    def _say(self, text: str) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(text, yellow=True)

    def _waiting(self, holder: Holder | None, timeout_s: float) -> None:
        who = holder.describe() if holder is not None else "another process"
        self._say(f"perf: waiting up to {timeout_s:g} s for the machine lock {self.lock.path}, held by {who} "
                  f"(runs that measure take turns: two at once corrupt each other's numbers)")

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if not marks.measured(session.items) or self.lock_state or self.config.option.collectonly:
            return
        try:
            self.lock_state = self.lock.acquire(self.settings.lock_timeout, self._waiting)
        except MachineBusy as exc:
            raise pytest.UsageError(str(exc)) from None
        except OSError as exc:
            raise pytest.UsageError(f"cannot open the perf machine lock {self.lock.path} ({exc.strerror}); pass "
                                    f"a writable --perf-state-dir") from None
        if self.lock_state == "nested":
            self._say(f"perf: the machine lock {self.lock.path} is held by the run that started this one")

    def close(self) -> None:
        self.lock.release()
        run_registry.unregister(self.record)
        self.record = None
        self.terminate.restore()


GUARD_KEY = pytest.StashKey[RunGuard]()


def install_run_guard(config: pytest.Config) -> RunGuard | None:
    if hasattr(config, "workerinput"):
        return None
    guard = RunGuard(config, config.stash[SETTINGS_KEY])
    guard.start()
    config.stash[GUARD_KEY] = guard
    config.pluginmanager.register(guard, "perf_run_guard")
    config.add_cleanup(guard.close)
    return guard


def header_lines(config: Any) -> list[str]:
    guard = config.stash.get(GUARD_KEY, None)
    return guard.lines() if guard is not None else []

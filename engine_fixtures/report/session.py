"""``PerfSession``: collects results during a pytest run, writes reports and (on request) baselines.

Wiring (plugin.py, at the end of ``pytest_configure``)::

    from engine_fixtures.report.session import install_session
    install_session(config, machine_key=info.key, machine=info.as_dict())

``install_session`` stashes the session under ``SESSION_KEY`` and registers it as a plugin object,
so its ``pytest_sessionfinish`` / ``pytest_terminal_summary`` hooks run (pytest-benchmark style).
At session end it writes ``results-<UTC stamp>.json``, ``summary.md`` and ``report.html`` into
``Settings.results_dir`` (appends the Markdown to ``$GITHUB_STEP_SUMMARY`` when set) and, with
``Settings.update_baselines``, writes one baseline per recorded result atomically and says so.
Nothing is written when no result was recorded. xdist workers never write.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from engine_fixtures.errors import ConfigError
from engine_fixtures.judge.gate import Verdict
from engine_fixtures.options import SETTINGS_KEY, Settings
from engine_fixtures.report.table import Row, markdown, rows_for, terminal_table
from engine_fixtures.store.baselines import Baseline, BaselineStore, atomic_write_text
from engine_fixtures.store.results import ResultsFile, RunResult
from engine_fixtures.store.runmeta import run_metadata


@dataclass(frozen=True)
class Record:
    nodeid: str
    scenario: str
    arm: Mapping[str, str]
    verdicts: tuple[Verdict, ...]
    baseline_path: str | None = None


class PerfSession:
    """Per-run state: recorded results and verdicts; writes reports at the end."""

    def __init__(self, settings: Settings, machine_key: str,
                 machine: Mapping[str, Any] | None = None) -> None:
        self.settings = settings
        self.machine_key = machine_key
        self.machine = dict(machine or {})
        self.store = BaselineStore(settings.baseline_dir, machine_key)
        self.results: list[RunResult] = []
        self.records: list[Record] = []
        self.written: list[Path] = []
        self.baselines_written: list[Path] = []
        self.errors: list[str] = []
        self.findings: list[str] = []  # facts about the system under test worth a reader's eye (not verdicts)

    def record(self, nodeid: str, result: RunResult, verdicts: Sequence[Verdict],
               baseline_path: Path | None) -> None:
        self.results.append(result)
        self.records.append(Record(nodeid, result.scenario, result.arm, tuple(verdicts),
                                   str(baseline_path) if baseline_path else None))

    def record_invariant(self, nodeid: str, scenario: str, verdict: Verdict) -> None:
        self.records.append(Record(nodeid, scenario, {}, (verdict,)))

    def rows(self) -> list[Row]:
        return [row for rec in self.records for row in rows_for(rec.scenario, rec.arm, rec.verdicts)]

    def results_file(self, meta: Mapping[str, Any] | None = None) -> ResultsFile:
        meta = dict(meta or run_metadata())
        return ResultsFile(results=tuple(self.results), machine_key=self.machine_key, machine=self.machine,
                           suite_commit=meta["suite_commit"], date=meta["date"], command=meta["command"],
                           versions=meta["versions"])

    def write_baselines(self, meta: Mapping[str, Any]) -> list[Path]:
        """One baseline per recorded scenario (the last result wins), atomically."""
        latest = {r.scenario: r for r in self.results}
        extra = {**meta, "machine": self.machine}
        return [self.store.write(Baseline.from_result(r, self.machine_key, extra, self.settings.tolerance))
                for r in latest.values()]

    def finish(self) -> None:
        """Write results, reports and (if asked) baselines. Idempotent per recorded state."""
        if not self.results and not self.records:
            return
        from engine_fixtures.report.html import write_html  # matplotlib only when there is a report

        meta = run_metadata()
        out = Path(self.settings.results_dir)
        out.mkdir(parents=True, exist_ok=True)
        stamp = meta["date"].replace(":", "").replace("+0000", "Z")
        results_path = out / f"results-{stamp}.json"
        atomic_write_text(results_path, self.results_file(meta).dumps())
        md = markdown(self.rows(), self.notes())
        atomic_write_text(out / "summary.md", md)
        self.written = [results_path, out / "summary.md"]
        try:
            self.written.append(write_html(out / "report.html", self.results_file(meta), self.rows()))
        except Exception as exc:  # a plot failure must not hide the verdicts
            self.errors.append(f"HTML report failed: {type(exc).__name__}: {exc}")
        step = os.environ.get("GITHUB_STEP_SUMMARY")
        if step:
            with open(step, "a", encoding="utf-8") as fh:
                fh.write(md)
        if self.settings.update_baselines and self.results:
            self.baselines_written = self.write_baselines(meta)

    def notes(self) -> list[str]:
        notes = [f"machine key `{self.machine_key}`, baselines in `{self.store.dir}`"]
        notes += [f"finding: {f}" for f in self.findings]
        if any(v.status == "no-baseline" for rec in self.records for v in rec.verdicts) or any(
                rec.baseline_path is None for rec in self.records if rec.arm):
            notes.append("missing baselines: run `perf-baseline update --from <results.json>` or "
                         "`pytest --perf-update-baselines`")
        return notes

    # pytest hooks of the registered plugin object
    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(session.config, "workerinput"):
            return
        self.finish()

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        for finding in self.findings:
            terminalreporter.write_line(f"perf finding: {finding}", yellow=True)
        if not self.records:
            return
        tr = terminalreporter
        tr.write_sep("=", "perf summary")
        tr.write(terminal_table(self.rows(), width=tr._tw.fullwidth, color=tr.hasmarkup))
        for path in self.written:
            tr.write_line(f"perf: wrote {path}")
        for path in self.baselines_written:
            tr.write_line(f"perf: updated baseline {path}")
        for err in self.errors:
            tr.write_line(f"perf: {err}", red=True)


SESSION_KEY = pytest.StashKey[PerfSession]()


def install_session(config: pytest.Config, machine_key: str,
                    machine: Mapping[str, Any] | None = None) -> PerfSession:
    """Create the session from the stashed Settings, stash it and register its hooks."""
    session = PerfSession(config.stash[SETTINGS_KEY], machine_key, machine)
    config.stash[SESSION_KEY] = session
    config.pluginmanager.register(session, "perf_session")
    return session


def get_session(config: pytest.Config) -> PerfSession:
    session = config.stash.get(SESSION_KEY, None)
    if session is None:
        raise ConfigError("the perf session is not installed: engine_fixtures/plugin.py must call "
                          "engine_fixtures.report.session.install_session(config, machine_key) in "
                          "pytest_configure")
    return session

"""``PerfSession``: collects results during a pytest run, writes reports and (on request) baselines.

Wiring (plugin.py, at the end of ``pytest_configure``)::

    from engine_fixtures.session.perf_session import install_session
    install_session(config, machine_key=info.key, machine=info.as_dict())

``install_session`` stashes the session under ``SESSION_KEY`` and registers it as a plugin object,
so its ``pytest_sessionfinish`` / ``pytest_terminal_summary`` hooks run (pytest-benchmark style).
At session end it writes ``results-<UTC stamp>.json`` into ``Settings.results_dir`` first, then appends the run
to the run history (``--perf-history-url``), adds it, with ``Settings.update_baselines``, to each scenario's pooled
baseline, guarded like ``perf-baseline update`` (``store.update``: it says what it added and what it refused), and
writes ``summary.md`` and ``report.html`` (appending the Markdown to ``$GITHUB_STEP_SUMMARY`` when set). A
measurement once made is kept: no step raises; one that fails is a line in ``failures`` naming the fix (a results
dir that broke during the run: the JSON goes to a fresh temp dir, named), and a session with any such line exits 1
(``session_failures``). ``session.preflight`` checked every path at start, so these are faults met during the run.
Nothing is written when no result was recorded. xdist workers never write.

Pools are read through ``pool(scenario)``: an unreadable pool (``BaselineError``; also one whose ``machine_key``
is not the key of the folder it lies in, a file copied by hand: it describes another machine) reads as a
``MissingBaseline``
carrying the error, kept once in ``unreadable``: the rows that read it are not judged and their test fails
(``recorder``), every other row and the same-run invariants still decide, and the run is never added to it.

The session judges against the pools of THIS host only (``machine.HostIdentity``, from ``machine["host"]``): a
pool recorded on another host, or without a host record, reads as no pool (``store.baselines``).
A strict measuring session with nothing judged fails: in strict mode, when the session recorded rows and not
one of them is a verdict (pass, regression, improvement, inconclusive: every row ``no-baseline`` or
``report-only``), its exit status becomes 1 although no test failed, and the summary says why and how to fix
it (``nothing_judged``). A session that records baselines (``--perf-update-baselines``) or says
``--perf-allow-missing-baselines`` is exempt; one that recorded nothing (everything skipped at collection:
``--perf-require-gpu`` guards that) is not a measuring session.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections import Counter
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from engine_fixtures.errors import BaselineError, ConfigError, PerfError
from engine_fixtures.judge.verdicts import Verdict
from engine_fixtures.machine import host_of
from engine_fixtures.options import Settings
from engine_fixtures.profile.report import ProfileBook
from engine_fixtures.report.table import Row, markdown, rows_for, terminal_table
from engine_fixtures.session import benchmarks
from engine_fixtures.session.settings import SETTINGS_KEY
from engine_fixtures.store.baselines import UPDATE_HINT, Baseline, BaselineStore, MissingBaseline
from engine_fixtures.store.files import atomic_write_text
from engine_fixtures.store.results import ResultsFile, RunResult
from engine_fixtures.store.runmeta import run_metadata, runner
from engine_fixtures.store.update import apply, describe, plan_update

EXPECTED = "xfail"  # the results file's status of an invariant a strict xfail expects to fail


@dataclass(frozen=True)
class Record:
    nodeid: str
    scenario: str
    arm: Mapping[str, str]
    verdicts: tuple[Verdict, ...]
    baseline_path: str | None = None
    judges: tuple[str, ...] = ()  # an invariant: the measured scenarios (its arms) whose run it judges
    expected: bool = False  # an invariant's regression that a strict xfail expects (a known regression)
    result: RunResult | None = None  # the measured result these rows judge (None: an invariant's, a contrast's)


class PerfSession:
    """Per-run state: recorded results and verdicts; writes reports and guarded baseline updates at the end."""

    def __init__(self, settings: Settings, machine_key: str,
                 machine: Mapping[str, Any] | None = None) -> None:
        self.settings = settings
        self.machine_key = machine_key
        self.machine = dict(machine or {})
        self.store = BaselineStore(settings.baseline_dir, machine_key, host_of(self.machine))  # this host's pools
        self.results: list[RunResult] = []
        self.records: list[Record] = []
        self.written: list[Path] = []
        self.baselines_written: list[Path] = []
        self.update_lines: list[str] = []
        self.errors: list[str] = []
        self.findings: list[str] = []  # facts about the system under test worth a reader's eye (not verdicts)
        self.unreadable: dict[str, str] = {}  # scenario -> why its pool cannot be read (reported once)
        self.failures: list[str] = []  # what this run could not write (results, history, pools): exit 1
        # The build A/B runs compare against, from the settings: its results are never pooled as baselines.
        self.reference = settings.reference.label if settings.reference is not None else ""
        self.run_token = uuid.uuid4().hex[:8]  # two runs in one second are still two runs
        self.history_note = ""
        self.profiles = ProfileBook()  # differential profiles (--perf-profile), taken after the verdicts
        self.figures: list[Any] = []  # the seed's figures measured in this run (judge.levels.FigureResult)

    def record(self, nodeid: str, result: RunResult, verdicts: Sequence[Verdict],
               baseline_path: Path | None) -> None:
        self.results.append(result)
        self.records.append(Record(nodeid, result.scenario, result.arm, tuple(verdicts),
                                   str(baseline_path) if baseline_path else None, result=result))

    def pool(self, scenario: str) -> Baseline | MissingBaseline:
        """The pool that judges ``scenario`` (``BaselineStore.load``); an unreadable one is a ``MissingBaseline``
        with its error, kept in ``unreadable`` (see the module docstring)."""
        try:
            base = self.store.load(scenario)
            if isinstance(base, Baseline) and (misfiled := self.store.misfiled(scenario, base)) is not None:
                raise BaselineError(misfiled)
            return base
        except BaselineError as exc:
            self.unreadable.setdefault(scenario, str(exc))
            return MissingBaseline(scenario, self.store.path_for(scenario), unreadable=str(exc))

    def record_diagnostic(self, result: RunResult, why: str) -> None:
        """Record a result that no test judges (a control arm) as report-only rows next to its baseline."""
        from engine_fixtures.judge.verdicts import diagnostic

        base = self.pool(result.scenario)
        runs_for = getattr(base, "runs_for", lambda _name: [])
        self.record(result.scenario, result, [diagnostic(n, v, runs_for(n), why) for n, v in result.samples.items()],
                    None)

    def record_invariant(self, nodeid: str, scenario: str, verdict: Verdict, judges: Sequence[str] = (),
                         expected: bool = False) -> None:
        """A row with no arm of its own (an invariant, a contrast, a figure's row); ``judges``: the measured
        scenarios whose run it judges (an invariant's two arms): its status is theirs in the results file, so a
        run whose invariant was inconclusive is refused as a baseline like one whose own row was."""
        self.records.append(Record(nodeid, scenario, {}, (verdict,), judges=tuple(judges), expected=expected))

    def rows(self) -> list[Row]:
        return [row for rec in self.records for row in rows_for(rec.scenario, rec.arm, rec.verdicts, rec.expected)]

    def verdict_statuses(self) -> dict[str, dict[str, str]]:
        """Per measured scenario, each row's status: its own metrics' and those of the invariants that judge it
        (``EXPECTED`` for a known regression's expected failure, which does not refuse the run)."""
        out: dict[str, dict[str, str]] = {}
        for rec in self.records:
            if rec.arm:
                out.setdefault(rec.scenario, {}).update({v.metric: v.status for v in rec.verdicts})
            for scenario in rec.judges:
                out.setdefault(scenario, {}).update(
                    {v.metric: EXPECTED if rec.expected and v.status == "regression" else v.status
                     for v in rec.verdicts})
        return out

    @property
    def injection(self) -> str:
        inj = self.settings.inject
        return inj.describe() if inj else ""

    def results_file(self, meta: Mapping[str, Any] | None = None) -> ResultsFile:
        meta = dict(meta or run_metadata())
        run_id = f"{self.machine_key}@{meta['date']}#{self.run_token}"
        return ResultsFile(results=tuple(self.results), machine_key=self.machine_key, machine=self.machine,
                           run_id=run_id, suite_commit=meta["suite_commit"], date=meta["date"], command=meta["command"],
                           versions=meta["versions"], verdicts=self.verdict_statuses(), injection=self.injection,
                           reference=self.reference, runner=runner(self.settings.runner_labels))

    def write_baselines(self, results: ResultsFile, path: Path) -> list[Path]:
        """Add this run to each scenario's pool, guarded (``store.update``); says what it did and refused. A pool
        that cannot be read or written is a line in ``failures``; an unreadable one is left as it is."""
        latest = {r.scenario: r for r in results.results}  # a scenario measured twice: the last result is the run
        why = "this run was not recorded in the baseline pools (--perf-update-baselines)"
        self.failures += [f"{why}: the pool of {s!r} is unreadable: {self.unreadable[s]}"
                          for s in sorted(latest.keys() & self.unreadable.keys())]
        run = replace(results, results=tuple(r for s, r in latest.items() if s not in self.unreadable))
        try:
            plans = plan_update(self.store, [run], accept=self.settings.accept)
            for plan in plans:
                self.update_lines += describe(plan)
            return apply(self.store, plans)
        except (OSError, PerfError) as exc:
            self.failures.append(f"{why}: {exc}; fix --perf-baseline-dir ({self.settings.sources['baseline_dir']}) "
                                 f"and add this run with `perf-baseline update --from {path}`")
            return []

    def write_results(self, results: ResultsFile, stamp: str) -> Path | None:
        """The results JSON, written first (see the module docstring); None when no directory would take it."""
        wanted = Path(self.settings.results_dir)
        try:
            return self._write_json(wanted, results, stamp)
        except OSError as exc:
            problem = (f"the results dir {wanted} could not be written ({exc}); fix --perf-results-dir "
                       f"({self.settings.sources['results_dir']})")
        try:
            path = self._write_json(Path(tempfile.mkdtemp(prefix="perf-results-")), results, stamp)
        except OSError as exc:
            self.failures.append(f"{problem}; nor could a temporary directory ({exc}): this run's results are lost")
            return None
        self.failures.append(f"{problem}: this run's results are in {path}")
        return path

    def _write_json(self, out: Path, results: ResultsFile, stamp: str) -> Path:
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"results-{stamp}.json"
        if path.exists():  # two runs in one second: never overwrite the other run's artifact
            path = out / f"results-{stamp}-{self.run_token}.json"
        atomic_write_text(path, results.dumps())
        return path

    def finish(self) -> None:
        """Write results, history, pools (if asked) and reports; a step that fails is a line in ``failures``."""
        if not self.results and not self.records:
            return
        from engine_fixtures.report.html import write_html  # matplotlib only when there is a report

        meta = run_metadata()
        results = self.results_file(meta)
        results_path = self.write_results(results, meta["date"].replace(":", "").replace("+0000", "Z"))
        if results_path is None:
            return
        out = results_path.parent
        self.written = [results_path]
        trends = self.write_history(results, results_path)  # after the JSON: a database failure never loses it
        if self.settings.update_baselines and self.results:
            self.baselines_written = self.write_baselines(results, results_path)
        md = markdown(self.rows(), self.notes())
        md += "\n".join(["", *self.profiles.markdown()]).rstrip() + "\n" if self.profiles.markdown() else ""
        try:
            atomic_write_text(out / "summary.md", md)
            self.written.append(out / "summary.md")
            step = os.environ.get("GITHUB_STEP_SUMMARY")
            if step:
                with open(step, "a", encoding="utf-8") as fh:
                    fh.write(md)
        except OSError as exc:
            self.failures.append(f"the summary could not be written ({exc})")
        try:
            self.written.append(write_html(out / "report.html", results, self.rows(),
                                           [*self.profiles.figures(), *trends], self.figures))
        except Exception as exc:  # a plot failure must not hide the verdicts
            self.errors.append(f"HTML report failed: {type(exc).__name__}: {exc}")

    def write_export(self, config: pytest.Config, bench: Any) -> None:
        """The pytest-benchmark export beside the results JSON (``session.benchmarks.write``); a failure is a line
        in ``failures``, the results JSON stays."""
        if not self.written:
            return
        results = self.written[0]
        try:
            self.written.append(benchmarks.write(config, bench, results.parent,
                                                 results.stem.removeprefix("results-")))
        except OSError as exc:
            self.failures.append(f"the pytest-benchmark export was not written ({exc}); this run's results are in "
                                 f"{results}, and --benchmark-json PATH writes the export elsewhere")

    def write_history(self, results: ResultsFile, path: Path) -> list[tuple[str, Any]]:
        """Append this run to the run history (``--perf-history-url``); returns the HTML report's trend plots.
        A history that cannot be opened or written is an error line with the fix, never a lost results file."""
        try:
            from engine_fixtures.report.trend import run_trends  # matplotlib only when there is a report
            from engine_fixtures.store.history import HistoryStore, shown  # SQLAlchemy only when there is a run
        except ImportError as exc:
            self.failures.append(f"run history not written: {exc}; reinstall the suite (`pip install -e .`, which "
                                 f"installs SQLAlchemy, alembic and psycopg). This run's results are in {path}")
            return []
        try:
            store = HistoryStore.open(self.settings.history_url, self.settings.results_dir)
            if store is None:
                return []
            with store:
                store.append(results, source=str(path))
                self.history_note = f"run history: appended to {shown(store.url)}"
                return run_trends(store, results)
        except Exception as exc:  # a driver's own error (e.g. text it cannot encode) is a FAILED line too
            why = exc if isinstance(exc, PerfError) else f"{type(exc).__name__}: {exc}"
            self.failures.append(f"run history not written: {why}. This run's results are in {path}; append them "
                                 f"later with `perf-baseline import {path} --history-url URL`")
        return []

    def notes(self) -> list[str]:
        notes = [f"machine key `{self.machine_key}`, baselines in `{self.store.dir}`, "
                 f"strict mode {'on' if self.settings.strict else 'off'} ({self.settings.sources.get('strict', '')})"]
        if self.history_note:
            notes.append(self.history_note)
        if self.injection:
            notes.append(f"INJECTED: {self.injection} (deliberate slowdowns/faults; never recorded as baselines)")
        if self.reference:
            notes.append(f"A/B against the reference build `{self.reference}`")
        notes += [f"finding: {f}" for f in self.findings]
        if any(v.status == "no-baseline" for rec in self.records for v in rec.verdicts):
            notes.append(f"no-baseline rows: record this host's baselines from >= 3 independent runs with "
                         f"{UPDATE_HINT} (a pool judges only the host that recorded it)")
        notes += [f"unreadable pool, its rows not judged: {why}" for why in self.unreadable.values()]
        notes += [f"FAILED: {why}" for why in self.session_failures()]
        return notes

    def session_failures(self) -> list[str]:
        """Why this session fails although no test may have: what it could not write, and ``nothing_judged``."""
        return [*self.failures, *filter(None, [self.nothing_judged()])]

    def nothing_judged(self) -> str | None:
        """Why this strict measuring session fails although no test may have: no row it recorded is a verdict
        (see the module docstring); None when it judged something, is not strict, records baselines, allows
        missing baselines or recorded nothing."""
        settings = self.settings
        if not settings.strict or settings.update_baselines or settings.allow_missing_baselines or not self.records:
            return None
        if any(v.is_verdict for rec in self.records for v in rec.verdicts):
            return None
        counts = Counter(v.status for rec in self.records for v in rec.verdicts)
        rows = ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "no rows"
        scenarios = len({rec.scenario for rec in self.records})
        return (f"strict mode: this session measured {scenarios} scenario(s) and judged none ({rows}): a run that "
                "judges nothing cannot see a regression, so it is not green. Record this host's pools with "
                f"{UPDATE_HINT}, measure a same-run contrast, or run with --perf-allow-missing-baselines (or "
                "--perf-strict no) to accept a run that only reports")

    # pytest hooks of the registered plugin object
    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> Generator[None, None, None]:
        """Before any other plugin's: this run's files first, then its entries into pytest-benchmark's session,
        which saves them in its own ``pytest_sessionfinish`` (``session.benchmarks``)."""
        if not hasattr(session.config, "workerinput"):
            self.finish()
            if (bench := benchmarks.session_of(session.config)) is not None:
                benchmarks.export(bench, self)
                self.write_export(session.config, bench)
            if self.settings.promote:
                self.promote(session.exitstatus == pytest.ExitCode.OK and not self.session_failures())
            if self.session_failures() and session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        yield

    def promote(self, green: bool) -> None:
        """``--perf-promote`` (``session.promote``): its line among the baseline lines; a failure to keep fails."""
        from engine_fixtures.session.promote import promote_installed

        judged = any(v.is_verdict for rec in self.records for v in rec.verdicts)
        try:
            self.update_lines.append(promote_installed(self.settings, self.machine_key, green, judged))
        except PerfError as exc:
            self.failures.append(f"--perf-promote: the installed build was not kept: {exc}")

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> Generator[None]:
        """The run ends on the verdict table: written after pytest's own short summary (this wrapper is outermost),
        just before its closing counts line. Report-only rows are counted here and shown in summary.md and
        report.html beside the verdicts."""
        result = yield
        for finding in self.findings:
            terminalreporter.write_line(f"perf finding: {finding}", yellow=True)
        if not self.records:
            return result
        tr = terminalreporter
        rows = self.rows()
        shown = [r for r in rows if r.verdict.status != "report-only"]
        tr.write_sep("=", "perf summary")
        if len(shown) < len(rows):
            tr.write_line(f"perf: {len(rows) - len(shown)} report-only row(s) (measured, never gating) are in "
                          "summary.md and report.html")
        for note in self.notes():
            tr.write_line(f"perf: {note}", red=note.startswith("FAILED"))
        for path in self.written:
            tr.write_line(f"perf: wrote {path}")
        for line in self.update_lines:
            tr.write_line(f"perf: baseline {line}")
        for note in self.profiles.notes:
            tr.write_line(f"perf profile: {note}", yellow=True)
        for err in self.errors:
            tr.write_line(f"perf: {err}", red=True)
        tr.write(terminal_table(shown, width=tr._tw.fullwidth, color=tr.hasmarkup))
        return result


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
                          "engine_fixtures.session.perf_session.install_session(config, machine_key) in "
                          "pytest_configure")
    return session

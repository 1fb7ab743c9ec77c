"""The run history: every run's results indexed in a database (SQLite by default, PostgreSQL for a fleet).

One interface over both back ends (SQLAlchemy Core, no SQL per dialect)::

    store = HistoryStore.open(settings.history_url, settings.results_dir)   # None when the option is 'none'
    store.append(results_file, source="results-....json")   # one transaction: all of the run or none of it
    store.runs(machine_key=..., label=..., since=...)        # RunSummary rows, oldest first
    store.load([run_id, ...])                                # the ResultsFiles back, exactly as written
    store.series("engine/*", "ttft_p50_ms")                  # per (machine key, scenario, metric): the points
    store.clean_candidates(machine_key, k)                   # the newest k clean runs per scenario

A run is written in one transaction, so a writer killed at any point leaves the run absent, never partial;
appending a run id that is already stored changes nothing (re-importing a directory is safe). The results JSON
stays the artifact; ``perf-baseline import`` rebuilds the index from the files.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine

from engine_fixtures.store import history_db
from engine_fixtures.store.clean import MARKS, is_clean
from engine_fixtures.store.history_db import HistoryError, connect, ensure_schema, resolve_url, shown, translated
from engine_fixtures.store.history_schema import metrics, results, run_labels, runs, samples
from engine_fixtures.store.results import RESULTS_FORMAT_VERSION, ResultsFile, RunResult

__all__ = ["HistoryError", "HistoryStore", "RunSummary", "SeriesPoint", "parse_date", "series_of", "upgrade"]

CHUNK = 500  # ids per IN (...) list when reading runs back


def parse_date(text: str) -> dt.datetime:
    """A results file's ISO 8601 date as naive UTC (what every back end stores)."""
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise HistoryError(f"run date {text!r} is not ISO 8601; re-run the suite to write a fresh results "
                           "file") from None
    if when.tzinfo is not None:
        when = when.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return when


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    machine_key: str
    runner: str
    labels: tuple[str, ...]
    date: str
    suite_commit: str
    sglang_version: str | None
    torch_version: str | None
    injection: str
    reference: str
    source: str
    scenarios: int


@dataclass(frozen=True)
class SeriesPoint:
    """One run's windows of one metric of one scenario."""

    run_id: str
    date: str
    machine_key: str
    scenario: str
    metric: str
    values: tuple[float, ...]
    status: str
    outcome: str
    injection: str
    reference: str

    @property
    def clean(self) -> bool:
        """The run of the scenario is clean (``store.clean``): no injection, no A/B, not judged bad."""
        return is_clean(self, self.outcome)


def _sample_rows(metric_pk: int, name: str, result: RunResult) -> list[dict[str, Any]]:
    """The samples table's rows of one metric: a measured value under the index of its window (a per-segment value
    sits on its segment's first window, ``RunResult.windows_of``), warmup values in order."""
    measured = result.samples.get(name, ())
    where = result.windows_of(name) if measured else ()
    return ([{"metric_pk": metric_pk, "warmup": False, "window_index": i, "value": v}
             for i, v in zip(where, measured, strict=True)]
            + [{"metric_pk": metric_pk, "warmup": True, "window_index": i, "value": v}
               for i, v in enumerate(result.warmup.get(name, ()))])


class HistoryStore:
    """A run history at one URL. ``open`` creates the schema in an empty database and refuses other revisions."""

    def __init__(self, engine: Engine, url: URL) -> None:
        self.engine = engine
        self.url = url

    @classmethod
    def open(cls, option: str | None, results_dir: Path, *, create: bool = True) -> HistoryStore | None:
        """The store at ``--perf-history-url`` (None for 'none'); ``create=False``: a missing SQLite file is an
        error, not a new empty history (for commands that only read)."""
        url = resolve_url(option, results_dir)
        if url is None:
            return None
        if not create and url.get_backend_name() == "sqlite" and not Path(url.database).exists():
            raise HistoryError(f"there is no run history at {url.database} ({history_db.OPTION}); a suite run "
                               "writes one there, `perf-baseline import DIR` fills it from results files, or "
                               "--history-url names another")
        return cls.at(url)

    @classmethod
    def at(cls, url: URL) -> HistoryStore:
        engine = connect(url)
        with history_db.fresh_file_removed_on_failure(engine, url):  # a full disk leaves no 0-byte file
            ensure_schema(engine, url)
        return cls(engine, url)

    def _read(self) -> sa.Connection:
        """A connection for reading: on SQLite a deferred transaction, so readers never queue behind writers."""
        return self.engine.connect().execution_options(**{history_db.READ_ONLY: True})

    def __repr__(self) -> str:
        return f"HistoryStore({shown(self.url)})"

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # writing

    def append(self, rf: ResultsFile, *, source: str = "", source_format: int = RESULTS_FORMAT_VERSION) -> bool:
        """Store one run in one transaction; False when its run id was already stored (nothing changes)."""
        when = parse_date(rf.date)
        versions = dict(rf.versions)
        labels = sorted({str(x) for x in rf.runner.get("labels", ()) if str(x)})
        with translated(self.url, "write to"), self.engine.begin() as conn:
            if conn.execute(sa.select(runs.c.id).where(runs.c.run_id == rf.run_id)).first() is not None:
                return False
            try:
                with conn.begin_nested():
                    run_pk = conn.execute(runs.insert().values(
                        run_id=rf.run_id, machine_key=rf.machine_key, runner=str(rf.runner.get("name", "")),
                        measured_at=when, date=rf.date, suite_commit=rf.suite_commit,
                        sglang_version=versions.get("sglang"), torch_version=versions.get("torch"),
                        versions=versions, machine=dict(rf.machine), command=rf.command, injection=rf.injection,
                        reference=rf.reference, source=source, source_format=source_format,
                        recorded_at=dt.datetime.now(dt.timezone.utc).replace(tzinfo=None),
                    ).returning(runs.c.id)).scalar_one()
            except sa.exc.IntegrityError:  # a concurrent writer stored the same run id first
                return False
            if labels:
                conn.execute(run_labels.insert(), [{"run_pk": run_pk, "label": label} for label in labels])
            for position, result in enumerate(rf.results):
                self._append_result(conn, run_pk, position, result, rf)
        return True

    @staticmethod
    def _append_result(conn: sa.Connection, run_pk: int, position: int, result: RunResult, rf: ResultsFile) -> None:
        result_pk = conn.execute(results.insert().values(
            run_pk=run_pk, position=position, scenario=result.scenario, arm=dict(result.arm),
            outcome=rf.outcome(result.scenario), metadata=dict(result.metadata),
        ).returning(results.c.id)).scalar_one()
        statuses = rf.verdicts.get(result.scenario, {})
        names = sorted(set(result.samples) | set(result.warmup) | set(statuses))
        ids = conn.execute(
            metrics.insert().returning(metrics.c.id, metrics.c.name, sort_by_parameter_order=True),
            [{"result_pk": result_pk, "name": n, "status": statuses.get(n, "unjudged")} for n in names],
        ).all()
        rows = [row for pk, name in ids for row in _sample_rows(pk, name, result)]
        if rows:
            conn.execute(samples.insert(), rows)

    # reading

    def runs(self, *, machine_key: str | None = None, label: str | None = None, runner: str | None = None,
             since: dt.datetime | None = None, scenario: str | None = None) -> list[RunSummary]:
        """Stored runs, oldest first, filtered by machine key, runner label or name, date and scenario glob."""
        q = sa.select(runs).order_by(runs.c.measured_at, runs.c.id)
        if machine_key is not None:
            q = q.where(runs.c.machine_key == machine_key)
        if runner is not None:
            q = q.where(runs.c.runner == runner)
        if since is not None:
            q = q.where(runs.c.measured_at >= since)
        if label is not None:
            q = q.where(runs.c.id.in_(sa.select(run_labels.c.run_pk).where(run_labels.c.label == label)))
        with translated(self.url, "read"), self._read() as conn:
            rows = conn.execute(q).mappings().all()
            pks = [r["id"] for r in rows]
            labels = self._labels(conn, pks)
            scen: dict[int, list[str]] = {}
            for chunk in _chunks(pks):
                for pk, name in conn.execute(sa.select(results.c.run_pk, results.c.scenario)
                                             .where(results.c.run_pk.in_(chunk))):
                    scen.setdefault(pk, []).append(name)
        out = []
        for r in rows:
            names = scen.get(r["id"], [])
            if scenario is not None and not any(fnmatch.fnmatchcase(s, scenario) for s in names):
                continue
            out.append(RunSummary(r["run_id"], r["machine_key"], r["runner"], tuple(labels.get(r["id"], ())),
                                  r["date"], r["suite_commit"], r["sglang_version"], r["torch_version"],
                                  r["injection"], r["reference"], r["source"], len(set(names))))
        return out

    @staticmethod
    def _labels(conn: sa.Connection, pks: Sequence[int]) -> dict[int, list[str]]:
        out: dict[int, list[str]] = {}
        for chunk in _chunks(pks):
            q = sa.select(run_labels.c.run_pk, run_labels.c.label).where(run_labels.c.run_pk.in_(chunk))
            for pk, label in conn.execute(q.order_by(run_labels.c.label)):
                out.setdefault(pk, []).append(label)
        return out

    def count(self) -> int:
        with translated(self.url, "read"), self._read() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(runs)).scalar_one())

    def load(self, run_ids: Iterable[str]) -> list[ResultsFile]:
        """The stored runs as ResultsFiles (oldest first); an unknown run id is a ``HistoryError``."""
        wanted = list(dict.fromkeys(run_ids))
        with translated(self.url, "read"), self._read() as conn:
            run_rows = [r for chunk in _chunks(wanted)
                        for r in conn.execute(sa.select(runs).where(runs.c.run_id.in_(chunk))).mappings()]
            missing = set(wanted) - {r["run_id"] for r in run_rows}
            if missing:
                raise HistoryError(f"run(s) {', '.join(sorted(missing))} are not in the history at {shown(self.url)}; "
                                   "list the stored runs with `perf-baseline runs`")
            pks = [r["id"] for r in run_rows]
            labels = self._labels(conn, pks)
            res_rows = [r for chunk in _chunks(pks) for r in conn.execute(
                sa.select(results).where(results.c.run_pk.in_(chunk))
                .order_by(results.c.run_pk, results.c.position)).mappings()]
            per_metric = self._metrics(conn, [r["id"] for r in res_rows])
        by_run: dict[int, list[Any]] = {}
        for r in res_rows:
            by_run.setdefault(r["run_pk"], []).append(r)
        return [self._results_file(r, by_run.get(r["id"], []), per_metric, labels.get(r["id"], []))
                for r in sorted(run_rows, key=lambda r: (r["measured_at"], r["id"]))]

    @staticmethod
    def _metrics(conn: sa.Connection, result_pks: Sequence[int]) -> dict[int, dict[str, Any]]:
        """Per result row: {metric name: (status, measured values, warmup values)}."""
        out: dict[int, dict[str, Any]] = {}
        for chunk in _chunks(result_pks):
            q = (sa.select(metrics.c.result_pk, metrics.c.name, metrics.c.status, samples.c.warmup,
                           samples.c.window_index, samples.c.value)
                 .select_from(metrics.outerjoin(samples, samples.c.metric_pk == metrics.c.id))
                 .where(metrics.c.result_pk.in_(chunk))
                 .order_by(metrics.c.result_pk, metrics.c.name, samples.c.warmup, samples.c.window_index))
            for pk, name, status, warm, _i, value in conn.execute(q):
                entry = out.setdefault(pk, {}).setdefault(name, (status, [], []))
                if value is not None:
                    entry[2 if warm else 1].append(value)
        return out

    @staticmethod
    def _results_file(run: Any, result_rows: Sequence[Any], per_metric: dict[int, dict[str, Any]],
                      labels: Sequence[str]) -> ResultsFile:
        rs, verdicts = [], {}
        for r in result_rows:
            table = per_metric.get(r["id"], {})
            rs.append(RunResult(r["scenario"], r["arm"], {n: v[1] for n, v in table.items() if v[1]},
                                {n: v[2] for n, v in table.items() if v[2]}, r["metadata"]))
            judged = {n: v[0] for n, v in table.items() if v[0] != "unjudged"}
            if judged:
                verdicts.setdefault(r["scenario"], {}).update(judged)
        # a run recorded with a runner keeps both keys (labels may be empty, as runmeta.runner writes them);
        # a format-1 file had no runner at all
        runner = {"name": run["runner"], "labels": list(labels)} if run["runner"] or labels else {}
        return ResultsFile(tuple(rs), run["machine_key"], run["machine"], run["suite_commit"], run["date"],
                           run["command"], run["versions"], run["run_id"], verdicts, run["injection"],
                           run["reference"], runner)

    def scenarios(self, pattern: str | None = None, machine_key: str | None = None) -> list[str]:
        q = sa.select(results.c.scenario).distinct()
        if machine_key is not None:
            q = q.join(runs, runs.c.id == results.c.run_pk).where(runs.c.machine_key == machine_key)
        with translated(self.url, "read"), self._read() as conn:
            names = conn.execute(q).scalars().all()
        return sorted(n for n in names if pattern is None or fnmatch.fnmatchcase(n, pattern))

    def series(self, pattern: str | None = None, metric: str | Sequence[str] | None = None,
               machine_key: str | None = None, scenarios: Sequence[str] | None = None, last: int | None = None
               ) -> dict[tuple[str, str, str], list[SeriesPoint]]:
        """Per (machine key, scenario, metric): one point per run, oldest first (a scenario measured twice in a
        run: its last result). ``scenarios``: exact ids instead of a glob; ``metric``: one name or several;
        ``last``: only the newest N runs that measured any of the scenarios (selected in the database)."""
        names = list(scenarios) if scenarios is not None else self.scenarios(pattern, machine_key)
        q = (sa.select(runs.c.run_id, runs.c.date, runs.c.machine_key, runs.c.injection, runs.c.reference,
                       results.c.scenario, results.c.position, results.c.outcome, metrics.c.name, metrics.c.status,
                       samples.c.value)
             .select_from(runs.join(results, results.c.run_pk == runs.c.id)
                          .join(metrics, metrics.c.result_pk == results.c.id)
                          .join(samples, samples.c.metric_pk == metrics.c.id))
             .where(samples.c.warmup.is_(False))
             .order_by(runs.c.measured_at, runs.c.id, results.c.position, samples.c.window_index))
        if metric is not None:
            q = q.where(metrics.c.name.in_([metric] if isinstance(metric, str) else list(metric)))
        if machine_key is not None:
            q = q.where(runs.c.machine_key == machine_key)
        points: dict[tuple[str, str, str], dict[str, tuple[int, list]]] = {}
        with translated(self.url, "read"), self._read() as conn:
            for chunk in _chunks(names):
                scoped = q.where(results.c.scenario.in_(chunk))
                if last:
                    newest = (sa.select(runs.c.id).select_from(runs.join(results, results.c.run_pk == runs.c.id))
                              .where(results.c.scenario.in_(chunk)).group_by(runs.c.id, runs.c.measured_at)
                              .order_by(runs.c.measured_at.desc(), runs.c.id.desc()).limit(last))
                    if machine_key is not None:
                        newest = newest.where(runs.c.machine_key == machine_key)
                    scoped = scoped.where(runs.c.id.in_(sa.select(newest.subquery().c.id)))
                for row in conn.execute(scoped):
                    per_run = points.setdefault((row.machine_key, row.scenario, row.name), {})
                    pos, acc = per_run.get(row.run_id, (row.position, []))
                    if row.position > pos:  # a later result of the scenario in the same run replaces it
                        pos, acc = row.position, []
                    if row.position == pos:
                        acc.append(row)
                    per_run[row.run_id] = (pos, acc)
        out: dict[tuple[str, str, str], list[SeriesPoint]] = {}
        for key, per_run in sorted(points.items()):
            pts = [SeriesPoint(run_id, r[0].date, r[0].machine_key, r[0].scenario, r[0].name,
                               tuple(x.value for x in r), r[0].status, r[0].outcome, r[0].injection, r[0].reference)
                   for run_id, (_pos, r) in per_run.items()]
            out[key] = pts  # the query's order: measured_at, then the order the runs were stored in
        return out

    def clean_candidates(self, machine_key: str, k: int, pattern: str | None = None,
                         judged_bad: bool = False) -> dict[str, list[str]]:
        """Per scenario, the run ids of the newest ``k`` clean runs of ``machine_key`` (oldest first; none for a
        scenario whose every run was judged bad): no injection, no A/B reference, not judged regression or
        inconclusive unless ``judged_bad`` (``--accept``; ``store.update.refusal`` decides again). The rule is
        ``store.clean``'s: the database leaves out the runs with a mark set (``clean.MARKS``; their scenarios are not
        listed), the rule itself judges each row that is left."""
        q = (sa.select(results.c.scenario, runs.c.run_id, results.c.outcome, *(runs.c[m] for m in MARKS))
             .select_from(runs.join(results, results.c.run_pk == runs.c.id))
             .where(runs.c.machine_key == machine_key, *(runs.c[m] == "" for m in MARKS))
             .order_by(runs.c.measured_at.desc(), runs.c.id.desc()))
        chosen: dict[str, list[str]] = {}
        with translated(self.url, "read"), self._read() as conn:
            for row in conn.execute(q):
                if pattern is not None and not fnmatch.fnmatchcase(row.scenario, pattern):
                    continue
                ids = chosen.setdefault(row.scenario, [])
                if len(ids) < k and row.run_id not in ids and is_clean(row, row.outcome, judged_bad=judged_bad):
                    ids.append(row.run_id)
        return {s: list(reversed(v)) for s, v in sorted(chosen.items())}


def _chunks(items: Sequence[Any]) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), CHUNK):
        yield items[i:i + CHUNK]


def upgrade(option: str | None, results_dir: Path) -> tuple[str | None, str]:
    """``perf-baseline migrate --history``: bring the store at the option's URL to this suite's revision."""
    url = resolve_url(option, results_dir)
    if url is None:
        raise HistoryError("--perf-history-url is 'none': there is no history to migrate")
    engine = connect(url)
    try:
        return history_db.upgrade(engine, url)
    finally:
        engine.dispose()


def series_of(files: Sequence[ResultsFile], pattern: str | None = None,
              metric: str | None = None) -> dict[tuple[str, str, str], list[SeriesPoint]]:
    """``HistoryStore.series`` over results files instead of a store (``perf-baseline history --from DIR``)."""
    out: dict[tuple[str, str, str], list[SeriesPoint]] = {}
    for rf in sorted(files, key=lambda f: (parse_date(f.date), f.run_id)):
        latest = {r.scenario: r for r in rf.results}
        for scenario, r in sorted(latest.items()):
            if pattern is not None and not fnmatch.fnmatchcase(scenario, pattern):
                continue
            statuses = rf.verdicts.get(scenario, {})
            for name, values in r.samples.items():
                if metric is None or name == metric:
                    out.setdefault((rf.machine_key, scenario, name), []).append(SeriesPoint(
                        rf.run_id, rf.date, rf.machine_key, scenario, name, tuple(values),
                        statuses.get(name, "unjudged"), rf.outcome(scenario), rf.injection, rf.reference))
    return dict(sorted(out.items()))

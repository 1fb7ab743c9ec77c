"""``perf-baseline`` commands over the run history: ``import``, ``runs``, ``history``.

- ``import PATH...`` appends results files (format 1 and 2; a directory: every results JSON below it, other
  JSON files are listed as skipped) to the history; a run already stored is left as it is; a path that does not
  exist is an error before the history is opened (or created).
- ``runs [--machine KEY] [--runner NAME] [--label L] [--since DATE] [--scenario GLOB]`` lists stored runs
  ("what did runner X measure last week").
- ``history [SCENARIO] [--metric M] [--png FILE]`` shows each metric's series per run and its change points
  (``judge.changepoint``) over the store, or over results files with ``--from``; ``--png`` draws it.

The store is ``--history-url`` (PERF_HISTORY_URL), by default ``<results dir>/history.sqlite``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path

from engine_fixtures import options
from engine_fixtures.errors import BaselineError
from engine_fixtures.judge.metrics import metric
from engine_fixtures.store.history import HistoryError, HistoryStore, parse_date, series_of, shown
from engine_fixtures.store.results import ResultsFile

HISTORY_OPTIONS = ("history_url", "results_dir")


def _opt(args: argparse.Namespace, name: str) -> object:
    return options.resolve(name, cli=getattr(args, name, None)).value


def open_store(args: argparse.Namespace, create: bool = False) -> HistoryStore:
    store = HistoryStore.open(_opt(args, "history_url"), _opt(args, "results_dir"), create=create)
    if store is None:
        raise HistoryError("--history-url is 'none' (PERF_HISTORY_URL?): this command needs a run history; give "
                           "its URL with --history-url")
    return store


def _json_files(paths: Sequence[Path]) -> list[tuple[Path, bool]]:
    """(file, named explicitly) for every JSON file named or found below a named directory."""
    out: list[tuple[Path, bool]] = []
    for p in paths:
        if p.is_dir():
            out += [(f, False) for f in sorted(p.rglob("*.json")) if not f.name.startswith(".")]
        else:
            out.append((p, True))
    return out


def read_results(path: Path, explicit: bool) -> tuple[ResultsFile, int] | None:
    """A results file and its format version; None for a JSON file below a directory that is not one."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BaselineError(f"{path} does not exist; pass results JSON files or directories of them") from None
    except (OSError, ValueError) as exc:
        if explicit:
            raise BaselineError(f"{path} cannot be read as JSON ({exc}); re-run the suite") from None
        return None
    if not explicit and not (isinstance(data, dict) and "results" in data and "machine_key" in data):
        return None
    return ResultsFile.from_json(data, source=str(path)), data.get("format_version")


def cmd_import(args: argparse.Namespace) -> int:
    missing = [p for p in args.paths if not p.exists()]
    if missing:  # before the store is opened: a history is never created for nothing
        raise BaselineError(f"{', '.join(map(str, missing))} does not exist; pass results JSON files or directories "
                            "of them (nothing was imported, no history created)")
    with open_store(args, create=True) as store:
        added = present = 0
        skipped: list[Path] = []
        for path, explicit in _json_files(args.paths):
            found = read_results(path, explicit)
            if found is None:
                skipped.append(path)
                continue
            rf, version = found
            if store.append(rf, source=str(path), source_format=version):
                added += 1
            else:
                present += 1
        print(f"imported {added} run(s) into {shown(store.url)}; {present} already stored")
        for path in skipped:
            print(f"skipped {path}: not a results file")
        print(f"the history holds {store.count()} run(s)")
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    since = parse_date(args.since) if args.since else None
    with open_store(args) as store:
        rows = store.runs(machine_key=args.machine, label=args.label, runner=args.runner, since=since,
                          scenario=args.scenario)
    for r in rows:
        versions = f"sglang {r.sglang_version or '-'}, torch {r.torch_version or '-'}"
        extra = "".join(f", {k} {v}" for k, v in (("injected", r.injection), ("A/B vs", r.reference)) if v)
        print(f"{r.date}  {r.run_id}  runner {r.runner or '-'} [{','.join(r.labels)}]  {r.scenarios} scenario(s), "
              f"{versions}, commit {r.suite_commit[:10] or '-'}{extra}")
    print(f"{len(rows)} run(s)")
    return 0


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def describe_series(t, table: bool = False) -> list[str]:
    """One metric's series as lines a person reads: its regimes and changes (and each run with ``table``)."""
    m = metric(t.metric)
    pts = t.points
    lines = [f"  {t.metric} ({m.unit}, {m.direction} is better): {len(pts)} run(s) {pts[0].date[:16]} .. "
             f"{pts[-1].date[:16]}"]
    if table:
        for i, p in enumerate(pts):
            mark = " injected" if p.injection else (" A/B" if p.reference else "")
            lines.append(f"    {i + 1:3d} {p.date[:19]}  median {_fmt(sorted(p.values)[len(p.values) // 2])}  "
                         f"windows {_fmt(min(p.values))}..{_fmt(max(p.values))}  {p.status}{mark}  {p.run_id}")
    lines.append("    " + "; ".join(f"runs {a + 1}-{b}: level {_fmt(level)}" for a, b, level in t.regimes()))
    if any(x is None for x in t.levels):
        lines.append("    (injected and A/B runs are shown but left out of the levels and change points)")
    if t.minor:
        floor = f"{m.floor:.0%}" if m.scale.name == "log" else f"{m.floor:g} {m.unit}"
        lines.append(f"    ({len(t.minor)} more significant change(s) smaller than the metric's floor of {floor}: "
                     "the runs are quiet, the change is not one the judge would flag)")
    for cp in t.changes:
        first = pts[cp.index]
        lines.append(f"    change at run {cp.index + 1} ({first.date[:19]}): {_fmt(t.value(cp.before_mean))} -> "
                     f"{_fmt(t.value(cp.after_mean))} ({t.relative(cp):+.1%}, p={cp.p_value:.3g}), first run "
                     f"{first.run_id}")
    return lines


def cmd_history(args: argparse.Namespace) -> int:
    from engine_fixtures.report import trend as trends  # matplotlib only for this command

    if args.results:
        files = [found[0] for p, explicit in _json_files(args.results)
                 if (found := read_results(p, explicit)) is not None]
        series = series_of([f for f in files if args.machine in (None, f.machine_key)], args.scenario, args.metric)
        where = ", ".join(map(str, args.results))
    else:
        with open_store(args) as store:
            series = store.series(args.scenario, args.metric, args.machine)
            where = shown(store.url)
    judged = {k: v for k, v in series.items() if metric(k[2]).judged or args.metric == k[2]}
    if not judged:
        path_like = args.scenario and Path(args.scenario).exists()
        hint = " (a path? read results files with --from PATH)" if path_like else ""
        print(f"no runs of {args.scenario or 'any scenario'}{' / ' + args.metric if args.metric else ''} in {where}"
              f"{hint}; import results with `perf-baseline import DIR` or check the scenario glob (quote it)")
        return 2
    found = 0
    computed = {}
    last_scenario = None
    for key, points in judged.items():
        t = trends.trend(points, alpha=args.alpha)
        computed[key] = t
        found += len(t.changes)
        if t.changes or args.metric or args.verbose:
            if key[:2] != last_scenario:
                print(f"{key[1]}  [{key[0]}]")
                last_scenario = key[:2]
            print("\n".join(describe_series(t, table=bool(args.metric))))
    print(f"{where}: {len({p.run_id for ps in judged.values() for p in ps})} runs, {len(judged)} series, "
          f"{found} change point(s)")
    if args.png:
        for path in _plots(computed, args.png, args.metric, trends):
            print(f"wrote {path}")
    return 1 if found else 0


def _plots(computed: dict, png: Path, metric_name: str | None, trends) -> list[Path]:
    per_scenario = trends.by_scenario(computed)
    paths = []
    for i, ((key, scenario), names) in enumerate(sorted(per_scenario.items())):
        chosen = [metric_name] if metric_name else trends.headline(names)
        chosen = [n for n in chosen if (key, scenario, n) in computed]
        if not chosen:
            continue
        pts = computed[(key, scenario, chosen[0])].points
        sub = f"{key}; {len(pts)} runs {pts[0].date[:10]} .. {pts[-1].date[:10]}"
        fig = trends.figure([computed[(key, scenario, n)] for n in chosen], scenario, sub)
        path = png if len(per_scenario) == 1 else png.with_name(f"{png.stem}-{i + 1}{png.suffix or '.png'}")
        paths.append(trends.write_png(fig, path))
    return paths


def add_parsers(add: Callable[..., argparse.ArgumentParser]) -> None:
    sp = add("import", cmd_import, "append results files (format 1 or 2) to the run history", HISTORY_OPTIONS)
    sp.add_argument("paths", nargs="+", type=Path, metavar="RESULT_OR_DIR")
    sp = add("runs", cmd_runs, "list the runs in the run history", HISTORY_OPTIONS)
    sp.add_argument("--machine", metavar="KEY")
    sp.add_argument("--runner", metavar="NAME")
    sp.add_argument("--label", metavar="LABEL")
    sp.add_argument("--since", metavar="DATE", help="ISO date, e.g. 2026-11-23")
    sp.add_argument("--scenario", metavar="GLOB")
    sp = add("history", cmd_history, "series and change points of a scenario's metrics over the run history",
             HISTORY_OPTIONS)
    sp.add_argument("scenario", nargs="?", default=None, metavar="SCENARIO", help="scenario id or glob (quote it)")
    sp.add_argument("--metric", metavar="NAME")
    sp.add_argument("--machine", metavar="KEY")
    sp.add_argument("--from", dest="results", nargs="+", type=Path, metavar="RESULT_OR_DIR",
                    help="read results files instead of the run history")
    sp.add_argument("--png", type=Path, metavar="FILE", help="draw the series and change points to this PNG")
    sp.add_argument("--alpha", type=float, default=0.01)
    sp.add_argument("-v", "--verbose", action="store_true", help="show every series, not only those that changed")


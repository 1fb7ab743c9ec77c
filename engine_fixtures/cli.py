"""``perf-baseline``: update, compare, show, history, migrate, gate-quality.

Exit status: 0 ok, 1 a regression (``compare``) or a change point (``history``), 2 a user error
(a ``PerfError`` whose message names the fix). ``--baseline-dir`` and ``--tolerance`` come from
``engine_fixtures.options`` (same precedence and env variables as the pytest plugin).
"""

from __future__ import annotations

import argparse
import fnmatch
import sys
from collections.abc import Sequence
from pathlib import Path

from engine_fixtures import options
from engine_fixtures.errors import PerfError
from engine_fixtures.judge import changepoint, gate_quality
from engine_fixtures.judge.gate import judge
from engine_fixtures.judge.metrics import metric
from engine_fixtures.judge.summary import summarize
from engine_fixtures.report.table import markdown, rows_for, terminal_table
from engine_fixtures.store.baselines import Baseline, BaselineStore, MissingBaseline, machine_keys
from engine_fixtures.store.results import ResultsFile


def _opt(args: argparse.Namespace, name: str) -> object:
    return options.resolve(name, cli=getattr(args, name, None)).value


def _match(scenario: str, pattern: str | None) -> bool:
    return pattern is None or fnmatch.fnmatchcase(scenario, pattern)


def _results_files(paths: Sequence[Path]) -> list[ResultsFile]:
    files: list[Path] = []
    for p in paths:
        files.extend(sorted(p.glob("results-*.json")) if p.is_dir() else [p])
    return sorted((ResultsFile.load(f) for f in files), key=lambda r: r.date)


def cmd_update(args: argparse.Namespace) -> int:
    root, tol = _opt(args, "baseline_dir"), _opt(args, "tolerance")
    for rf in _results_files(args.results):
        store = BaselineStore(root, rf.machine_key)
        meta = {"suite_commit": rf.suite_commit, "date": rf.date, "command": rf.command,
                "versions": dict(rf.versions), "machine": dict(rf.machine)}
        for result in rf.results:
            if not _match(result.scenario, args.scenario):
                continue
            path = store.path_for(result.scenario)
            if args.dry_run:
                print(f"would write {path}")
            else:
                store.write(Baseline.from_result(result, rf.machine_key, meta, tol))
                print(f"wrote {path}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    root, tol = _opt(args, "baseline_dir"), _opt(args, "tolerance")
    rows = []
    for rf in _results_files(args.results):
        store = BaselineStore(root, rf.machine_key)
        for result in rf.results:
            base = store.load(result.scenario)
            samples = {} if isinstance(base, MissingBaseline) else base.samples
            verdicts = [judge(m, samples.get(m), v, tol) for m, v in result.samples.items()]
            rows += rows_for(result.scenario, result.arm, verdicts)
    print(markdown(rows) if args.markdown else terminal_table(rows, width=140), end="")
    return 1 if any(r.verdict.status == "regression" for r in rows) else 0


def cmd_show(args: argparse.Namespace) -> int:
    root = _opt(args, "baseline_dir")
    keys = [args.machine] if args.machine else machine_keys(root)
    if not keys:
        print(f"no baselines under {root}; create them with `perf-baseline update --from <results.json>`")
    for key in keys:
        store = BaselineStore(root, key)
        print(f"[{key}] {store.dir}")
        for scenario in store.scenarios():
            b = store.load(scenario)
            assert isinstance(b, Baseline)
            for name, values in b.samples.items():
                s = summarize(values)
                print(f"  {scenario}  {name} = {s.median:.4g} {metric(name).unit} (n={s.n}, cv={s.cv:.1%}, "
                      f"tol={b.tolerances.get(name, 0):.0%}) {b.metadata.get('date', '')}")
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    runs = _results_files(args.results)
    series: dict[tuple[str, str, str], list[tuple[str, float]]] = {}
    for rf in runs:
        for r in rf.results:
            if not _match(r.scenario, args.scenario):
                continue
            for name, values in r.samples.items():
                if metric(name).gates:
                    series.setdefault((rf.machine_key, r.scenario, name), []).append(
                        (rf.date, summarize(values).median))
    found = 0
    for (key, scenario, name), pts in sorted(series.items()):
        for cp in changepoint.detect([v for _, v in pts], alpha=args.alpha):
            found += 1
            print(f"{key} {scenario} {name}: change at run {cp.index} ({pts[cp.index][0]}): "
                  f"{cp.before_mean:.4g} -> {cp.after_mean:.4g} ({cp.relative_change:+.1%}, p={cp.p_value:.3g})")
    print(f"{len(runs)} runs, {len(series)} series, {found} change points")
    return 1 if found else 0


def cmd_migrate(args: argparse.Namespace) -> int:
    root = _opt(args, "baseline_dir")
    for key in machine_keys(root):
        for path in BaselineStore(root, key).migrate_all(dry_run=args.dry_run):
            print(("would migrate " if args.dry_run else "migrated ") + str(path))
    return 0


def cmd_gate_quality(args: argparse.Namespace) -> int:
    print(gate_quality.render(gate_quality.table(trials=args.trials, seed=args.seed)))
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="perf-baseline", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    def add(name: str, func, help_: str, opts: tuple[str, ...] = ("baseline_dir",)) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help_)
        options.add_options(sp.add_argument, prefix="", names=opts)
        sp.set_defaults(func=func)
        return sp

    sp = add("update", cmd_update, "write baselines from results JSON files", ("baseline_dir", "tolerance"))
    sp.add_argument("--from", dest="results", nargs="+", type=Path, required=True, metavar="RESULT")
    sp.add_argument("--scenario", metavar="GLOB")
    sp.add_argument("--dry-run", action="store_true")
    sp = add("compare", cmd_compare, "judge results against stored baselines", ("baseline_dir", "tolerance"))
    sp.add_argument("results", nargs="+", type=Path, metavar="RESULT")
    sp.add_argument("--markdown", action="store_true")
    sp = add("show", cmd_show, "list stored baselines")
    sp.add_argument("--machine", metavar="KEY")
    sp = add("history", cmd_history, "change points over results files (or directories of them)", ())
    sp.add_argument("results", nargs="+", type=Path, metavar="RESULT_OR_DIR")
    sp.add_argument("--scenario", metavar="GLOB")
    sp.add_argument("--alpha", type=float, default=0.01)
    sp = add("migrate", cmd_migrate, "rewrite older-format baselines in the current format")
    sp.add_argument("--dry-run", action="store_true")
    sp = add("gate-quality", cmd_gate_quality, "false-alarm and detection rates of the gate", ())
    sp.add_argument("--trials", type=int, default=2000)
    sp.add_argument("--seed", type=int, default=0)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.func(args))
    except PerfError as exc:
        print(f"perf-baseline: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

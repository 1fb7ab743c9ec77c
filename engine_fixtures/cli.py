"""``perf-baseline``: update, compare, show, validate, history, migrate.

- ``update --from RESULTS...`` adds those runs to the pooled baselines; ``update --from-runs K`` rebuilds each
  scenario's pool from the newest K clean runs of this machine key and this host (with ``--machine KEY``: the
  host of that key's newest run) in the run history (``--history-url``, default ``.perf-results/history.sqlite``),
  or among the results named by ``--from DIR``, and says which. A pool is one host's (``store.baselines``).
  Both show the per-metric change (level, runs, what the pool catches; a run already pooled is said to be, and
  left as it is); ``--dry-run`` writes nothing and exits as the real update would (a baseline directory this user
  cannot write is an error, before anything is written); a run
  judged regression/inconclusive (its own rows or a same-run invariant that compares it) needs ``--accept
  REASON`` (stored with it); runs with injected slowdowns or A/B runs are never recorded. ``--from-runs K``
  needs K >= 1; a scenario with fewer than K clean runs (0 included: every run of it judged bad) is not pooled
  and the command exits 2 naming it and how many it found (the scenarios that had K are written).
- ``compare RESULTS...`` judges results files against the pooled baselines (exit 1 on a regression).
- ``show`` lists the pools with the host each was recorded on (and whether it judges this host); a baseline
  directory (here and for ``migrate``) or a ``--machine`` key that does not exist is an error;
  ``validate DIR`` judges every run of the unchanged build against the K runs recorded
  before it (and every injected run against the K runs before it): false alarms and detections on real runs.
- ``reference promote BUILD|show`` (``cli_reference``): keep the last good build beside the pools, what
  ``--perf-reference stored`` runs the A/B against.
- ``import``, ``runs``, ``history`` (``cli_history``): fill the run history from results files, list its runs,
  show a scenario's series and change points (and draw them); ``migrate`` rewrites old baseline formats, and
  with ``--history`` migrates the run history's schema.

Exit status: 0 ok, 1 a regression (``compare``), a false alarm (``validate``) or a change point (``history``),
2 a user error (a ``PerfError`` whose message names the fix, with this command's own spelling of the shared
options: ``--history-url``, not ``--perf-history-url``).
"""

from __future__ import annotations

import argparse
import fnmatch
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from engine_fixtures import cli_history, cli_reference, options
from engine_fixtures.errors import BaselineError, PerfError
from engine_fixtures.judge.metrics import metric
from engine_fixtures.judge.noise import MIN_RUNS
from engine_fixtures.judge.verdicts import judge_result
from engine_fixtures.machine import HostIdentity, MachineInfo, host_of
from engine_fixtures.option_values import parse_positive_int
from engine_fixtures.report.table import markdown, rows_for, terminal_table
from engine_fixtures.store import history
from engine_fixtures.store.baselines import POOL_RUNS, Baseline, BaselineRun, BaselineStore, machine_keys
from engine_fixtures.store.clean import is_clean
from engine_fixtures.store.results import ResultsFile
from engine_fixtures.store.update import Planned, apply, describe, last_clean_runs, plan_update, write_problem


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
    root = _opt(args, "baseline_dir")
    short: dict[str, int] = {}
    if args.from_runs is not None:
        k = args.from_runs
        here = None if args.machine else MachineInfo.collect()
        key = args.machine or here.key
        files, where, measured = _clean_runs_source(args, key)
        store = BaselineStore(root, key)
        chosen = last_clean_runs(files, key, k, args.scenario, here.host if here else None, args.accept)
        chosen = {s: chosen.get(s, []) for s in sorted(set(chosen) | measured)}  # 0 clean runs is "0 of K" too
        if not any(chosen.values()):
            on = f" on this host, {here.host.describe()}" if here and here.host else ""
            raise BaselineError(f"no clean runs of machine key {key}{on} in {where} (runs judged regression or "
                                "inconclusive need --accept REASON; injected and A/B runs, and runs without a host "
                                f"record, are never pooled); run the suite {k} times (separate processes; the CPU "
                                "tier: `python3 -m tox -e update-baselines`)")
        host = host_of(next(runs for runs in chosen.values() if runs)[-1].machine)
        print(f"the newest {k} clean run(s) of {key} in {where}, of host {_host_text(host)}:")
        plans = []
        for scenario, runs in sorted(chosen.items()):
            if len(runs) < k:
                short[scenario] = len(runs)
                print(f"{scenario}: found {len(runs)} clean run(s) of the {k} asked; not pooled")
                continue
            print(f"{scenario}: pooling {', '.join(r.run_id for r in runs)}")
            plans += plan_update(store, runs, only=frozenset({scenario}), replace_pool=True, accept=args.accept)
    else:
        if not args.results:
            raise PerfError("update needs --from RESULTS... or --from-runs K; see perf-baseline update --help")
        plans = []
        for key in sorted({rf.machine_key for rf in _results_files(args.results)}):
            runs = [rf for rf in _results_files(args.results) if rf.machine_key == key]
            plans += plan_update(BaselineStore(root, key), runs, scenario_glob=args.scenario, accept=args.accept,
                                 replace_pool=args.replace)
    for plan in plans:
        print("\n".join(describe(plan)))
    _write(root, plans, args.dry_run)
    if short:
        found = ", ".join(f"{s} ({n} of {args.from_runs})" for s, n in sorted(short.items()))
        fewest = min(short.values())
        fewer = (f", or pool what there is with --from-runs {fewest}" if fewest >= MIN_RUNS else
                 f"; a pool judges from {MIN_RUNS} runs")
        if fewest == 0:
            fewer += ("; a scenario with 0 clean runs was measured, but every run of it was judged regression or "
                      "inconclusive: look at those verdicts, and pool them only with --accept REASON")
        raise BaselineError(f"--from-runs {args.from_runs}: {len(short)} scenario(s) have fewer clean runs than asked, "
                            f"so their pools were not written: {found}. Run the suite "
                            f"{args.from_runs - fewest} more time(s) (separate processes, at different times){fewer}")
    return 0


def _write(root: Path, plans: Sequence[Planned], dry_run: bool) -> None:
    """Write the planned pools, each machine key's into its directory; a directory that cannot take them stops the
    command before anything is written, dry run or not (so both exit alike)."""
    by_key: dict[str, list[Planned]] = {}
    for plan in plans:
        if plan.after is not None:
            by_key.setdefault(plan.after.machine_key, []).append(plan)
    stores = {key: BaselineStore(root, key) for key in by_key}
    problems = [why for key, ps in by_key.items() if (why := write_problem(stores[key], ps)) is not None]
    if dry_run:
        print("dry run: nothing written")
    fix = (f"; pass --baseline-dir a directory this user can write (or make {root} writable), then run this "
           "command again")
    if problems:
        raise BaselineError(f"the pools cannot be written under {root}: {'; '.join(problems)}{fix}"
                            + ("" if dry_run else "; nothing was written"))
    if dry_run:
        return
    for key, ps in by_key.items():
        try:
            written = apply(stores[key], ps)
        except OSError as exc:
            raise BaselineError(f"writing the pools into {stores[key].dir} failed ({exc}){fix}") from None
        for path in written:
            print(f"wrote {path}")


def _clean_runs_source(args: argparse.Namespace, key: str) -> tuple[list[ResultsFile], str, frozenset[str]]:
    """The candidate runs for ``update --from-runs``: the results named by --from, else the run history; and the
    scenarios the history holds of ``key`` (some with no clean run: those runs are not loaded)."""
    if args.results:
        return _results_files(args.results), ", ".join(map(str, args.results)), frozenset()
    with cli_history.open_store(args) as hist:
        candidates = hist.clean_candidates(key, args.from_runs, args.scenario, judged_bad=bool(args.accept))
        ids = {i for run_ids in candidates.values() for i in run_ids}
        return hist.load(ids), f"the run history at {history.shown(hist.url)}", frozenset(candidates)


def cmd_compare(args: argparse.Namespace) -> int:
    root, floor = _opt(args, "baseline_dir"), _opt(args, "floor")
    rows = []
    for rf in _results_files(args.results):
        store = BaselineStore(root, rf.machine_key, host_of(rf.machine))  # a pool judges only its own host's runs
        for result in rf.results:
            base = store.load(result.scenario)
            pool = base if isinstance(base, Baseline) else None
            rows += rows_for(result.scenario, result.arm,
                             judge_result(result.samples, pool, scenario=result.scenario, floor=floor))
    print(markdown(rows) if args.markdown else terminal_table(rows, width=160), end="")
    return 1 if any(r.verdict.status == "regression" for r in rows) else 0


def _existing_baseline_dir(args: argparse.Namespace) -> Path:
    """``--baseline-dir`` for a command that reads the pools there (``show``, ``migrate``): one that is not there is
    an error naming it, not an empty listing."""
    root = Path(_opt(args, "baseline_dir"))
    if not root.is_dir():
        raise BaselineError(f"there is no baseline directory {root} (--baseline-dir, PERF_BASELINE_DIR): name the "
                            f"directory this host's pools were recorded into, or record them there with "
                            f"`perf-baseline update --from-runs {POOL_RUNS} --baseline-dir {root}`")
    return root


def cmd_show(args: argparse.Namespace) -> int:
    root = _existing_baseline_dir(args)
    present = machine_keys(root)
    if args.machine and args.machine not in present:
        raise BaselineError(f"no pools of machine key {args.machine} under {root}; it holds "
                            f"{', '.join(present) or 'no pools at all'}")
    keys = [args.machine] if args.machine else present
    if not keys:
        print(f"no baselines under {root}; record them with `perf-baseline update --from-runs {POOL_RUNS}`")
        return 0
    here = MachineInfo.collect().host
    misplaced = 0
    for key in keys:
        store = BaselineStore(root, key)
        print(f"[{key}] {store.dir}")
        for scenario in store.scenarios():
            b = store.pool(scenario)
            assert b is not None
            dates = sorted(r.date[:10] for r in b.runs)
            judges = "judges this host" if here is not None and here.same_host(b.host) else "judges nothing here"
            print(f"  {scenario}: {len(b.runs)} run(s) {dates[0]}..{dates[-1]}")
            if (misfiled := store.misfiled(scenario, b)) is not None:
                print(f"    judges nothing: {misfiled}")
                misplaced += 1
            print(f"    host {_host_text(b.host)}: {judges}")
            for name, n in b.noise().items():
                catches = n.get("detectable")
                shown = "-" if catches is None else (f"{catches:.1%}" if n["scale"] == "log" else f"{catches:.3g}")
                print(f"    {name} = {n['level']:.4g} {metric(name).unit}; between-run sd {n['between_sd']:.3g}, "
                      f"within-run sd {n['within_sd']:.3g} ({n['scale']}); catches {shown}")
    if misplaced:
        print(f"perf-baseline: {misplaced} pool(s) lie in the folder of another machine key and judge nothing "
              "(above)", file=sys.stderr)
        return 1
    return 0


def _host_text(host: HostIdentity | None) -> str:
    return host.describe() if host is not None else "unknown (no host record: written before pools recorded it)"


def cmd_validate(args: argparse.Namespace) -> int:
    """Judge real runs against pools of earlier real runs (rolling), and injected runs against the newest pool."""
    files = _results_files(args.results)
    counts: dict[tuple[str, str], Counter[str]] = {}
    for key in sorted({f.machine_key for f in files}):
        runs = [f for f in files if f.machine_key == key]
        for scenario in sorted({r.scenario for f in runs for r in f.results if _match(r.scenario, args.scenario)}):
            # every run that measured the build as it is (no injection, no A/B), whatever it was judged then
            clean = [f for f in runs if is_clean(f, f.outcome(scenario), judged_bad=True) and _has(f, scenario)]
            faulty = [f for f in runs if f.injection and _has(f, scenario)]
            for i in range(args.pool, len(clean)):
                _tally(counts, "clean", scenario, clean[i - args.pool:i], clean[i])
            for f in faulty:
                prior = [c for c in clean if c.date < f.date][-args.pool:] or clean[-args.pool:]
                if len(prior) == args.pool:
                    _tally(counts, f"injected {f.injection}", scenario, prior, f)
    false_alarms = 0
    for (label, metric_name), c in sorted(counts.items()):
        total = sum(c.values())
        print(f"{label:40s} {metric_name:32s} " + ", ".join(f"{k} {v}/{total}" for k, v in sorted(c.items())))
        if label == "clean":
            false_alarms += c["regression"] + c["improvement"]
    print(f"{false_alarms} false verdict(s) on clean runs (regression or improvement against earlier clean runs)")
    return 1 if false_alarms else 0


def _has(rf: ResultsFile, scenario: str) -> bool:
    return any(r.scenario == scenario for r in rf.results)


def _tally(counts: dict, label: str, scenario: str, pool: Sequence[ResultsFile], run: ResultsFile) -> None:
    runs = tuple(BaselineRun.from_result(next(r for r in f.results if r.scenario == scenario), f) for f in pool)
    result = next(r for r in run.results if r.scenario == scenario)
    base = Baseline(scenario, result.arm, run.machine_key, runs)
    for v in judge_result(result.samples, base, scenario=scenario):
        if v.is_verdict:
            counts.setdefault((label, f"{v.metric}"), Counter())[v.status] += 1


def cmd_migrate(args: argparse.Namespace) -> int:
    if args.history:
        before, after = history.upgrade(_opt(args, "history_url"), _opt(args, "results_dir"))
        print(f"run history at schema revision {after}" + ("" if before == after else f" (was {before or 'empty'})"))
        return 0
    root = _existing_baseline_dir(args)
    for key in machine_keys(root):
        for path in BaselineStore(root, key).migrate_all(dry_run=args.dry_run):
            print(("would migrate " if args.dry_run else "migrated ") + str(path))
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="perf-baseline", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    def add(name: str, func, help_: str, opts: tuple[str, ...] = ("baseline_dir",)) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help_)
        options.add_options(sp.add_argument, prefix="", names=opts)
        sp.set_defaults(func=func, options=opts)
        return sp

    sp = add("update", cmd_update, "add runs to the pooled baselines (guarded)",
             ("baseline_dir", "results_dir", "history_url"))
    sp.add_argument("--from", dest="results", nargs="+", type=Path, metavar="RESULT_OR_DIR")
    sp.add_argument("--from-runs", type=parse_positive_int, metavar="K", help="rebuild each pool from the "
                    "newest K clean runs of the machine key in the run history (or in the --from results); fewer "
                    "than K for a scenario is an error")
    sp.add_argument("--machine", metavar="KEY", help="machine key for --from-runs (default: this machine's)")
    sp.add_argument("--scenario", metavar="GLOB")
    sp.add_argument("--accept", metavar="REASON", help="record runs judged regression/inconclusive (their own rows "
                    "or a same-run invariant of theirs), with this reason")
    sp.add_argument("--replace", action="store_true", help="start the pools afresh from these runs")
    sp.add_argument("--dry-run", action="store_true")
    sp = add("compare", cmd_compare, "judge results against the pooled baselines", ("baseline_dir", "floor"))
    sp.add_argument("results", nargs="+", type=Path, metavar="RESULT")
    sp.add_argument("--markdown", action="store_true")
    sp = add("show", cmd_show, "list the pooled baselines and what each catches")
    sp.add_argument("--machine", metavar="KEY")
    sp = add("validate", cmd_validate, "judge real runs against pools of earlier real runs", ())
    sp.add_argument("results", nargs="+", type=Path, metavar="RESULT_OR_DIR")
    sp.add_argument("--pool", type=int, default=3, metavar="K")
    sp.add_argument("--scenario", metavar="GLOB")
    cli_history.add_parsers(add)
    cli_reference.add_parsers(add)
    sp = add("migrate", cmd_migrate, "rewrite older-format baselines in the current format (--history: migrate the "
             "run history's schema)", ("baseline_dir", "history_url", "results_dir"))
    sp.add_argument("--dry-run", action="store_true")
    sp.add_argument("--history", action="store_true", help="migrate the run history at --history-url instead")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.func(args))
    except PerfError as exc:  # the library names the pytest options; this command's own are spelled its way
        print(f"perf-baseline: error: {options.spelled_for_cli(str(exc), args.options)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

"""Guarded baseline updates, shared by ``pytest --perf-update-baselines`` and ``perf-baseline update``.

- A run enters a pool only if it is *clean* (the rule is ``store.clean``'s): its verdicts for the scenario were
  ``pass``, ``improvement`` or none at all (a first run on a new machine has nothing to be judged against). A run
  judged ``regression`` or ``inconclusive`` is refused unless ``accept`` gives a reason, which is stored with the
  run; the verdicts include the same-run invariants that compare the scenario with another arm (a known
  regression's expected failure, ``xfail``, does not refuse it).
- Runs measured with an injected slowdown or fault, or in an A/B comparison against a reference build, are
  never pooled: they do not describe the build.
- A pool belongs to one host (``machine.HostIdentity``, recorded as the pool's ``host``): a run whose results
  carry no host record (written before hosts were recorded) is never pooled, and a run of another host than the
  pool's is refused, naming both hosts; ``replace_pool`` (``--replace``, ``update --from-runs``) starts the pool
  afresh on the runs' host.
- ``plan_update`` computes every change first (a run already in the pool is said to be, and left as it is);
  ``describe`` shows per metric the level, the runs pooled and the change the pool can catch, before and after;
  ``write_problem`` says why the planned files cannot be written (before any is, dry run or not); ``apply`` writes
  them atomically.
- ``last_clean_runs`` picks, per scenario, the newest K clean runs of one machine key and one host among results
  files.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from engine_fixtures.errors import BaselineError
from engine_fixtures.machine import HostIdentity, host_of
from engine_fixtures.store.baselines import MAX_RUNS, POOL_RUNS, Baseline, BaselineRun, BaselineStore
from engine_fixtures.store.clean import BAD_OUTCOMES, JUDGED, unclean
from engine_fixtures.store.files import place_problem
from engine_fixtures.store.results import ResultsFile


@dataclass(frozen=True)
class Planned:
    scenario: str
    path: Path
    before: Baseline | None
    after: Baseline | None
    added: tuple[str, ...]
    refused: tuple[str, ...]
    pooled: tuple[str, ...] = ()  # runs already in the pool: left as they are, not added again


def refusal(rf: ResultsFile, scenario: str, accept: str | None) -> str | None:
    """Why this run of ``scenario`` may not enter a pool, or None: it is not clean (``store.clean``; judged bad
    only without ``accept``) or has no host record."""
    outcome = rf.outcome(scenario)
    why = unclean(rf, outcome, judged_bad=bool(accept))
    if why == "injection":
        return f"{rf.run_id}: measured with an injected slowdown or fault ({rf.injection}); never a baseline"
    if why == "reference":
        return f"{rf.run_id}: an A/B run against {rf.reference}; never a baseline"
    if host_of(rf.machine) is None:
        return (f"{rf.run_id}: its results have no host record (written before hosts were recorded); a pool judges "
                "only the host that recorded it, so a run of an unknown host is never pooled")
    if why == JUDGED:
        rows = sorted(name for name, status in rf.verdicts.get(scenario, {}).items() if status == outcome)
        return (f"{rf.run_id}: {scenario} was judged {outcome} ({', '.join(rows)}); record it only with --accept "
                "REASON (the reason is stored with the run)")
    return None


def plan_update(store: BaselineStore, runs: Sequence[ResultsFile], *, scenario_glob: str | None = None,
                only: frozenset[str] | None = None, accept: str | None = None, replace_pool: bool = False,
                max_runs: int = MAX_RUNS) -> list[Planned]:
    """What adding ``runs`` (oldest first) to ``store`` would do, per scenario (``only``: these scenarios)."""
    plans: dict[str, Planned] = {}
    for rf in sorted(runs, key=lambda r: r.date):
        if rf.machine_key != store.machine_key:
            raise BaselineError(f"{rf.run_id} was measured on machine key {rf.machine_key!r}, not "
                                f"{store.machine_key!r}; its numbers do not describe this machine")
        for result in rf.results:
            if scenario_glob is not None and not fnmatch.fnmatchcase(result.scenario, scenario_glob):
                continue
            if only is not None and result.scenario not in only:
                continue
            plan = plans.get(result.scenario)
            if plan is None:
                before = store.pool(result.scenario)
                plan = Planned(result.scenario, store.path_for(result.scenario), before,
                               None if replace_pool else before, (), ())
            if plan.after is not None and any(r.run_id == rf.run_id for r in plan.after.runs):
                plans[result.scenario] = replace(plan, pooled=(*plan.pooled, rf.run_id))
                continue
            why = refusal(rf, result.scenario, accept) or _other_host(rf, plan)
            if why is not None:
                plans[result.scenario] = replace(plan, refused=(*plan.refused, why))
                continue
            outcome = rf.outcome(result.scenario)
            run = BaselineRun.from_result(result, rf, accepted=accept if outcome in BAD_OUTCOMES else None)
            after = plan.after.with_run(run, max_runs) if plan.after is not None else Baseline(
                result.scenario, result.arm, store.machine_key, (run,), {"machine": dict(rf.machine)},
                host_of(rf.machine))
            plans[result.scenario] = replace(plan, after=after, added=(*plan.added, rf.run_id))
    return list(plans.values())


def _other_host(rf: ResultsFile, plan: Planned) -> str | None:
    """Why ``rf`` may not join the pool ``plan`` builds: it was measured on another host than the pool's."""
    host = host_of(rf.machine)
    if plan.after is None or host is None or host.same_host(plan.after.host):
        return None
    pool_host = plan.after.host.describe() if plan.after.host is not None else "an unknown host (no host record)"
    return (f"{rf.run_id}: measured on {host.describe()}, but the pool at {plan.path} is of {pool_host}; a pool "
            f"belongs to one host: start this host's pool with `perf-baseline update --from-runs {POOL_RUNS}` or "
            "`--replace` (both replace the stored pool), or keep each host's pools in its own PERF_BASELINE_DIR")


def write_problem(store: BaselineStore, plans: Iterable[Planned]) -> str | None:
    """Why ``apply`` cannot write these plans into ``store`` (None: it can, or there is nothing to write); creates
    nothing, so a dry run can say it too."""
    if not any(p.after is not None and p.added for p in plans):
        return None
    return place_problem(store.dir)


def apply(store: BaselineStore, plans: Iterable[Planned]) -> list[Path]:
    return [store.write(p.after) for p in plans if p.after is not None and p.added]


def describe(plan: Planned) -> list[str]:
    """Human-readable per-metric diff of one planned update."""
    lines = [f"{plan.path}: +{len(plan.added)} run(s) {', '.join(plan.added) or '-'}"]
    lines += [f"  already pooled (0 added, left as it is): {run_id}" for run_id in plan.pooled]
    lines += [f"  refused {why}" for why in plan.refused]
    if plan.after is None or not plan.added:
        return lines
    old = plan.before.noise() if plan.before is not None else {}
    new = plan.after.noise()
    for name in sorted(set(old) | set(new)):
        a, b = old.get(name, {}), new.get(name, {})
        lines.append(f"  {name}: level {_fmt(a.get('level'))} -> {_fmt(b.get('level'))}, runs {a.get('runs', 0)} -> "
                     f"{b.get('runs', 0)}, catches {_pct(a)} -> {_pct(b)}")
    return lines


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def _pct(entry: dict) -> str:
    d = entry.get("detectable")
    if d is None:
        return "-"
    return f"{d:.1%}" if entry.get("scale") == "log" else f"{d:.3g}"


def last_clean_runs(files: Sequence[ResultsFile], machine_key: str, k: int, scenario_glob: str | None = None,
                    host: HostIdentity | None = None, accept: str | None = None) -> dict[str, list[ResultsFile]]:
    """Per scenario, the newest ``k`` clean runs of ``machine_key`` measured on ``host`` (oldest first; none for a
    scenario those runs measured but never cleanly); without ``host``, on the host of the newest run of
    ``machine_key`` that records one (a pool is one host's). Clean is ``refusal``'s (``store.clean``'s rule): with
    ``accept``, runs judged regression or inconclusive count too."""
    mine = sorted((f for f in files if f.machine_key == machine_key), key=lambda r: r.date, reverse=True)
    if host is None:
        host = next((h for f in mine if (h := host_of(f.machine)) is not None), None)
    chosen: dict[str, list[ResultsFile]] = {}
    for rf in (f for f in mine if host is not None and host.same_host(host_of(f.machine))):
        for result in rf.results:
            s = result.scenario
            if scenario_glob is not None and not fnmatch.fnmatchcase(s, scenario_glob):
                continue
            if len(chosen.setdefault(s, [])) < k and refusal(rf, s, accept) is None:
                chosen[s].append(rf)
    return {s: list(reversed(v)) for s, v in chosen.items()}

"""Judge stored windows again with the suite's own judge: the A/B of two builds from its results file (issue 44), or
a live group's contrasts. Nothing is measured.

    python -m tools.studies.ab_rejudge [ab] RESULTS.json [--history AB_NULL.json [--run ID [--others]]]
        [--project 5,10,20] [--spread METRIC=PCT,...]
    python -m tools.studies.ab_rejudge live RESULTS.json MODULE GROUP [--cores N]

Both forms read each result's windows as the session held them (``RunResult.block_windows``: every window with its
mirrored block) and judge a contrast with ``scenarios.blocks_run.contrast_verdicts`` at the run's own alpha and
budget, from the results' metadata.

``ab`` (the default form): the A/B's windows come back per replica (the ``window_replica`` metadata the runner
records) with each block's instance group (the unit), judged with the A/A history it had (``--history``: the host's
``ab-null`` file, less the entries of this run and after it, or none; ``--others``: every other run's entry, leave
one out), and with its own same-build pairs, as the run did; then what a pair unit consists of (``components``).
``--project K,...`` judges it again as if the host's history held K null units of the spread measured here (the mean
square of the history's units and this run's own pairs, per metric, or ``--spread``): what an A/B of this size
catches once K units are in.

``live``: a live group's contrasts (one engine, arms switched live). MODULE names the test module that declares the
group (e.g. perf_tests.sglang.gpu_tier.seed_matrix) and GROUP its attribute (CPU, IPC); arms with
``threads="quota"`` are resolved for a quota of N cores (the run's; default 4, the H200's), and each block is its own
unit. Used for the H200 nightly of 2026-12-03, whose capped-thread contrast was measured but whose test lost its
verdicts to a bug fixed since (docs/results/h200-nightly-2026-12-03).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from engine_fixtures.judge.decide import NullSample
from engine_fixtures.judge.metrics import metric
from engine_fixtures.scenarios.blocks_run import Judging, contrast_verdicts
from engine_fixtures.scenarios.engine import EngineScenario
from engine_fixtures.scenarios.group import AB_CANDIDATE, AB_REFERENCE, Group
from engine_fixtures.scenarios.nulls import pair_units
from engine_fixtures.store.results import ResultsFile, RunResult

AB = EngineScenario("ab-cpu-buffer", transport="cpu", copy="buffer")  # the one-arm A/B its results were measured by
# per arm (live) or member (A/B), its windows as the session held them: (block, {metric: value})
Windows = dict[str, list[tuple[int, dict[str, float]]]]


def stored(path: Path, key: str, wanted: Collection[Any], what: str) -> list[RunResult]:
    """The results of ``path`` whose ``metadata[key]`` is one of ``wanted`` (both forms read their windows from
    these); none: ``SystemExit`` saying the file holds no ``what``."""
    found = [r for r in ResultsFile.load(path).results if r.metadata.get(key) in wanted]
    if not found:
        raise SystemExit(f"{path}: no {what} in it")
    return found


def load(path: Path) -> tuple[Group, Windows, list[int], dict[str, Any]]:
    """The A/B group (with its replicas), its windows per member, each block's instance group, and the candidate's
    metadata (alpha, budget, axes)."""
    windows: Windows = {}
    meta: dict[str, Any] = {}
    unit_of: dict[int, int] = {}
    for r in stored(path, "group_member", (AB_REFERENCE, AB_CANDIDATE), "A/B of two builds"):
        m = r.metadata
        members = m.get("window_replica") or [m["group_member"]] * len(m["window_block"])
        for member, (block, values), unit in zip(members, r.block_windows(), m["window_instance_group"],
                                                 strict=True):
            windows.setdefault(member, []).append((block, values))
            unit_of[block] = unit
        if m["group_member"] == AB_CANDIDATE:
            meta = {**m, "axes": dict(r.arm)}
    if not meta:
        raise SystemExit(f"{path}: no A/B of two builds in it (no candidate)")
    group = Group.ab_of(AB, None, None).with_replicas(int(meta.get("replicas", 1)))  # type: ignore[arg-type]
    return group, windows, [unit_of[b] for b in range(max(unit_of) + 1)], meta


def live_group(module: str, name: str, cores: float) -> Group:
    """The live group ``module.name`` as declared, its ``threads="quota"`` arms resolved for ``cores``."""
    return getattr(importlib.import_module(module), name).resolved(lambda _a: cores)


def load_live(path: Path, group: Group) -> tuple[Windows, dict[str, Any]]:
    """The live group's windows per arm, and one arm's metadata (blocks, alpha per look, budget)."""
    windows: Windows = {}
    meta: dict[str, Any] = {}
    for r in stored(path, "live_group", (group.id,), f"result of live group {group.id}"):
        windows[r.metadata["live_arm"]] = r.block_windows()
        meta = r.metadata
    return windows, meta


def history_sample(path: Path | None, before_run: str | None, *, others: bool = False) -> dict[str, list[float]]:
    """Per metric, the history's pooled units recorded before ``before_run`` (its own entry and later ones left
    out); with ``others``, every entry's but ``before_run``'s own (leave one out: what the host's other runs, later
    ones too, would lend it)."""
    if path is None:
        return {}
    out: dict[str, list[float]] = {}
    for e in json.loads(path.read_text())["entries"]:
        if before_run is not None and e["run"].endswith(before_run):
            if others:
                continue
            break
        for k, v in e["units"].items():
            out.setdefault(k, []).extend(v)
    return out


def judge(group: Group, windows: Mapping[str, Sequence[tuple[int, dict[str, float]]]], units: Sequence[int],
          meta: Mapping[str, Any], history: Mapping[str, Sequence[float]]) -> list[Any]:
    """The A/B's one contrast, judged with ``history`` as the host's A/A units."""
    def null_for(_label: str, name: str) -> NullSample | None:
        return NullSample.of(history[name], "the history") if history.get(name) else None

    judging = Judging(meta["alpha_per_look"], meta["budget_instance_groups"], None, None, null_for, meta["axes"])
    return contrast_verdicts(group, group.contrasts[0], windows, units, judging)


def judge_live(group: Group, windows: Windows, meta: Mapping[str, Any]) -> list[tuple[Any, list[Any]]]:
    """Each contrast of the live group with its verdicts; one engine, so each block is its own unit."""
    blocks = range(int(meta["blocks"]))
    judging = Judging(meta["alpha_per_look"], meta["budget_blocks"])
    return [(c, contrast_verdicts(group, c, windows, blocks, judging)) for c in group.contrasts]


def components(windows: Mapping[str, Sequence[tuple[int, Mapping[str, float]]]], name: str) -> dict[str, float]:
    """What a pair unit of ``name`` consists of (judged scale: log for ratio metrics): the engines' block means as a
    layout of engines nested in their build by block (no replication), method of moments. ``offset``: the sd of an
    engine's own level (what more blocks never remove), ``block``: the sd of what every engine shared in a block
    (pairing removes it), ``residual``: an engine's block mean's own noise. A pair unit over B blocks has variance
    ``2 offset^2 + 2 residual^2 / B``."""
    log = metric(name).scale.name == "log"
    members = sorted(windows)
    blocks = sorted({b for m in members for b, w in windows[m] if name in w})
    x = np.full((len(members), len(blocks)), np.nan)
    for i, m in enumerate(members):
        for j, b in enumerate(blocks):
            vals = [w[name] for bb, w in windows[m] if bb == b and name in w]
            if vals:
                x[i, j] = np.mean(np.log(vals) if log else vals)
    if np.isnan(x).any() or min(x.shape) < 2:
        return {}
    e, k = x.shape
    arms = [m.partition("@")[0] for m in members]  # engines nested in their build: a real change is no offset
    arm_mean = {a: x[[i for i, b in enumerate(arms) if b == a]].mean(0) for a in set(arms)}
    within = x - np.array([arm_mean[a] for a in arms])  # each engine against its build's mean, block by block
    resid = within - within.mean(1, keepdims=True)
    ms_resid = float((resid ** 2).sum() / ((e - len(arm_mean)) * (k - 1)))
    ms_engine = float(k * (within.mean(1) ** 2).sum() / (e - len(arm_mean)))
    ms_block = float(e * x.mean(0).var(ddof=1))
    return {"offset": math.sqrt(max(ms_engine - ms_resid, 0.0) / k),
            "block": math.sqrt(max(ms_block - ms_resid, 0.0) / e),
            "residual": math.sqrt(ms_resid), "blocks": float(k), "engines": float(e)}


FORMS = ("ab", "live")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tools.studies.ab_rejudge", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    forms = p.add_subparsers(dest="form", required=True, metavar="{ab,live}")
    ab = forms.add_parser("ab", help="the A/B of two builds from its results file (the default: RESULTS.json first)")
    ab.add_argument("results", type=Path)
    ab.add_argument("--history", type=Path, help="the host's ab-null/<shape>.json")
    ab.add_argument("--run", help="this run's id suffix in the history (its entry and later ones are left out)")
    ab.add_argument("--others", action="store_true", help="with --run: pool every other run's entry, later ones "
                    "too (leave one out), not only the earlier ones")
    ab.add_argument("--project", default="", help="K,...: judge as if the history held K units of this spread")
    ab.add_argument("--spread", default="", help="METRIC=PCT,...: project with this pair-scale spread instead of the "
                    "measured one (e.g. another run's)")
    live = forms.add_parser("live", help="a live group's contrasts from a results file's stored windows")
    live.add_argument("results", type=Path)
    live.add_argument("module", help="the module that declares the group (perf_tests.sglang.gpu_tier.seed_matrix)")
    live.add_argument("group", help="the group's attribute in MODULE (CPU, SMOKE_CPU, IPC)")
    live.add_argument("--cores", type=float, default=4.0, help="the run's quota in cores, for threads=\"quota\" "
                      "arms (default 4, the H200's)")
    return p


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] not in (*FORMS, "-h", "--help"):
        argv.insert(0, "ab")  # RESULTS.json first: the A/B, the command as issue 44's runs wrote it
    p = parser()
    args = p.parse_args(argv)
    if args.form == "live":
        rejudge_live(args.results, live_group(args.module, args.group, args.cores))
        return
    if args.others and not args.run:
        p.error("--others needs --run: the run to leave out")
    rejudge_ab(args)


def rejudge_live(path: Path, group: Group) -> None:
    windows, meta = load_live(path, group)
    print(f"{group.id}: {meta['blocks']} blocks, alpha per look {meta['alpha_per_look']}, "
          f"budget {meta['budget_blocks']}")
    for c, verdicts in judge_live(group, windows, meta):
        for v in verdicts:
            catches = "-" if v.detectable is None else f"{v.detectable:.3g}"
            print(f"| {c.label} | {v.metric} | {v.change_text(v.delta)} | {catches} | {v.windows} | {v.status} |")
            print(f"    {v.message}")


def rejudge_ab(args: argparse.Namespace) -> None:
    group, windows, units, meta = load(args.results)
    history = history_sample(args.history, args.run, others=args.others)
    print(f"{args.results.name}: {len(set(units))} instance group(s), {len(units)} blocks, {group.replicas} "
          f"replicas a build, alpha per look {meta['alpha_per_look']:.4g}; history units: "
          f"{ {k: len(v) for k, v in history.items() if k in ('requests_per_s', 'tpot_gmean_ms')} }")
    verdicts = judge(group, windows, units, meta, history)
    for v in verdicts:
        print(f"| {'other runs' if args.others else 'as run'} | {v.metric} | {v.change_text(v.delta)} | "
              f"{'-' if v.detectable is None else f'{v.detectable:.1%}'} | {v.status} |\n    {v.message}")
    for v in verdicts:
        c = components(windows, v.metric)
        if c:
            pair = math.sqrt(2 * c["offset"] ** 2 + 2 * c["residual"] ** 2 / c["blocks"])
            share = 2 * c["offset"] ** 2 / pair**2
            print(f"| components | {v.metric} | engine offset sd {c['offset']:.2%} | block sd {c['block']:.2%} | "
                  f"residual sd {c['residual']:.2%} a block mean | pair unit over {c['blocks']:.0f} blocks "
                  f"{pair:.2%}, of which the offsets {share:.0%} | {c['engines']:.0f} engines |")
    for k in [int(x) for x in args.project.split(",") if x]:
        spread = {}
        for v in verdicts:
            own = [e for _, e in pair_units(group, windows, units, v.metric)]
            pooled = [*history.get(v.metric, ()), *own]
            spread[v.metric] = math.sqrt(sum(e * e for e in pooled) / len(pooled)) if pooled else math.nan
        for item in filter(None, args.spread.split(",")):
            name, _, pct = item.partition("=")
            spread[name] = math.log1p(float(pct) / 100)
        projected = {n: [s] * k for n, s in spread.items()}  # K units of the measured root mean square
        for v in judge(group, windows, units, meta, projected):
            print(f"| history of {k} | {v.metric} | {v.change_text(v.delta)} | "
                  f"{'-' if v.detectable is None else f'{v.detectable:.1%}'} | {v.status} | pair-scale spread "
                  f"{spread[v.metric]:.2%} |")


if __name__ == "__main__":
    main()

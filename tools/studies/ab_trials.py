"""The A/B trials of one or more ``ab_study`` runs, judged after the fact as the default A/B judges at its first look,
with this host's A/A history (issue 36).

    python -m tools.studies.ab_trials CALL1/ab_study.json [CALL2/ab_study.json ...] \\
        [--pairs 2] [--blocks 2,4] [--skip-first-groups 0] [--out DIR]

``ab_study --sizes 0,10`` starts instance groups one after another (the reference, a size-0 candidate and a sized
one, alive together, in mirrored blocks) and logs every window. Here the logged groups of every call (read together
by ``components.merged``) are cut into trials of ``--pairs`` consecutive groups, and each candidate of a trial is
judged against its reference by the A/B gate itself (``ab_study.judge_trial``: the instance group as the unit, the
first look's alpha), with the variance pooled with an A/A history: the size-0 pairs of every group **outside** the
trial (the history a production A/B borrows from earlier null runs on this host; never its own units). So:

- a size-0 verdict other than ``pass`` is a false alarm (or an undecided null);
- a size-S verdict ``regression`` on TPOT is a catch, and ``catches`` is what that trial would have caught.

``--blocks 2,4`` judges every trial again on the first 2 (then 4) mirrored blocks of each group only, so one data
set says what a group of fewer blocks (``--perf-ab-blocks``, default 2) would have decided. Each row also says what a
production A/B of that many pairs and blocks costs, from this run's own parts: two engine starts and their first
light per pair (the groups' measured start time per member) and two arms' windows per block (the measured time per
window, switches included). The patch's realised size comes two ways: on one live engine (``ab_study
--live-check``) and across fresh engines (the trials' mean TPOT delta).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from engine_fixtures.judge.decide import NullSample
from engine_fixtures.scenarios.blocks_run import ArmWindows, unit_effects
from tools.studies.ab_study import JUDGED, REFERENCE, SCENARIOS, judge_trial, render, study_group
from tools.studies.components import merged

Groups = list[dict[str, list[dict[str, float]]]]  # per instance group: arm -> its windows' values, in order


def group_windows(report: Mapping[str, Any], blocks: int | None = None) -> Groups:
    """Every instance group's windows per arm in time order, those of its first ``blocks`` mirrored blocks where
    given (a mirrored block serves each arm twice, in an order and its reverse: ``judge.blocks``); a group some arm
    of which has no window (a call cut short) is left out."""
    per: dict[int, dict[str, list[tuple[float, dict[str, float]]]]] = {}
    for w in report["windows"]:
        per.setdefault(w["group"], {}).setdefault(w.get("own_arm", w["arm"]), []).append((w["t_s"], w["values"]))
    arms = 1 + len(report["sizes"])
    keep = None if blocks is None else blocks * windows_per_block(report)
    return [{arm: [v for _t, v in sorted(ws, key=lambda x: x[0])][:keep] for arm, ws in per[g].items()}
            for g in sorted(per) if len(per[g]) == arms]


def windows_per_block(report: Mapping[str, Any]) -> int:
    """Windows of one arm in one mirrored block, as logged: an arm's most windows in a group over the blocks."""
    counts: dict[tuple[int, str], int] = {}
    for w in report["windows"]:
        key = (w["group"], w.get("own_arm", w["arm"]))
        counts[key] = counts.get(key, 0) + 1
    return max(1, max(counts.values(), default=0) // report["blocks_per_group"])


def trial_windows(groups: Groups) -> tuple[ArmWindows, list[int]]:
    """The groups as one trial: each arm's windows labelled by block (numbered on across the groups), and the
    instance group of every block."""
    windows: dict[str, list[tuple[int, dict[str, float]]]] = {}
    block_unit: list[int] = []
    for unit, g in enumerate(groups):
        n = min(len(ws) for ws in g.values())
        for arm, ws in g.items():
            windows.setdefault(arm, []).extend((len(block_unit) + k, v) for k, v in enumerate(ws[:n]))
        block_unit += [unit] * n
    return windows, block_unit


def null_units(groups: Groups, zero: str, name: str) -> list[float]:
    """The size-0 candidate's unit effect against the reference in each group: the A/A units."""
    out = []
    for g in groups:
        windows, block_unit = trial_windows([g])
        per_unit = unit_effects(name, windows[REFERENCE], windows[zero], block_unit)[1]
        out += [e for e in per_unit if math.isfinite(e)]
    return out


def judge_trials(report: Mapping[str, Any], pairs: int, blocks: int | None = None) -> list[dict[str, dict]]:
    """Every trial of ``pairs`` consecutive groups, each candidate judged with the A/A units of the other groups."""
    sizes = [float(s) for s in report["sizes"]]
    if 0.0 not in sizes:
        raise SystemExit("the A/A history needs a size-0 candidate: ab_study --sizes 0,...")
    decl = study_group(SCENARIOS[report["scenario"]], len(sizes), patch=report.get("patch", "slow-decode"))
    zero = f"c{sizes.index(0.0) + 1}"
    groups = group_windows(report, blocks)
    trials = []
    for first in range(0, len(groups) - pairs + 1, pairs):
        inside = groups[first:first + pairs]
        outside = groups[:first] + groups[first + pairs:]
        units = {m: null_units(outside, zero, m) for m in JUDGED}
        history = {m: NullSample.of(u, f"the size-0 pairs of {len(outside)} other group(s) of this host")
                   for m, u in units.items() if u}
        windows, block_unit = trial_windows(inside)
        trials.append({str(report["sizes"][i]): judge_trial(decl, windows, block_unit, i + 1, pairs,
                                                            lambda _c, m, h=history: h.get(m))
                       for i in range(len(sizes))})
    return trials


def costs(report: Mapping[str, Any]) -> dict[str, float]:
    """This run's parts of an A/B's wall time: an engine's start (to ready, one at a time) and its first light,
    and a window (its length, warm-up and the switches between arms)."""
    members = 1 + len(report["sizes"])
    starts = [(g["start_s"] + g.get("first_light_s", 0.0)) / members for g in report["groups"] if "start_s" in g]
    per_window = []
    by_group: dict[int, list[float]] = {}
    for w in report["windows"]:
        by_group.setdefault(w["group"], []).append(float(w["t_s"]))
    for ts in by_group.values():
        ts.sort()
        if len(ts) >= 2:
            per_window.append((ts[-1] - ts[0]) / (len(ts) - 1))
    return {"engine_start_s": statistics.median(starts) if starts else math.nan,
            "window_s": statistics.median(per_window) if per_window else math.nan}


def ab_minutes(parts: Mapping[str, float], pairs: int, windows: int) -> float:
    """A production A/B's wall time at its first look: per pair two starts and two arms' ``windows`` windows."""
    return pairs * (2 * parts["engine_start_s"] + 2 * windows * parts["window_s"]) / 60.0


def live_check(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{"call": i, "size": s, **c} for i, call in enumerate(report.get("calls", []))
            for s, c in (call.get("live_check") or {}).items()]


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("reports", type=Path, nargs="+")
    ap.add_argument("--pairs", type=int, default=2, help="instance groups per trial (the A/B's first look)")
    ap.add_argument("--blocks", default="", help="also judge on the first B blocks of each group (e.g. 2,4)")
    ap.add_argument("--skip-first-groups", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    report = merged(args.reports, args.skip_first_groups)
    parts = costs(report)
    console = Console(width=240)
    found: dict[str, Any] = {"sources": report["sources"], "pairs": args.pairs, "costs": parts,
                             "live_check": live_check(report), "by_blocks": {}}
    for blocks in [None, *(int(b) for b in args.blocks.split(",") if b)]:
        trials = judge_trials(report, args.pairs, blocks)
        b = blocks or report["blocks_per_group"]
        minutes = ab_minutes(parts, args.pairs, b * windows_per_block(report))
        found["by_blocks"][str(b)] = {"trials": trials, "ab_minutes": minutes}
        spin = [statistics.fmean(g["spin_ms"][i] for g in report["groups"] if g.get("spin_ms"))
                for i in range(len(report["sizes"]))]
        table = render({**report, "trials": trials, "pairs_per_trial": args.pairs, "spin_ms": spin})
        table.title = (f"{table.title}; {b} block(s) per group, A/A history: the other groups' size-0 pairs; "
                       f"a production A/B of {args.pairs} pairs x {b} blocks: about {minutes:.1f} min")
        console.print(table)
    console.print_json(json.dumps({"costs": parts, "live_check": found["live_check"]}))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "ab_trials.json").write_text(json.dumps(found, indent=1))


if __name__ == "__main__":
    main()

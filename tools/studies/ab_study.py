"""How sensitive is the A/B gate of separate engines on a real engine? Inject slowdowns of known size and count
detections.

    python -m tools.studies.ab_study --model DIR --scenario cpu-copy=buffer --sizes 0,5,10,20 \
        --pairs 3 --budget-s 540 --out DIR [--engine-cpus 0-11 --client-cpus 12-15] [--patch slow-decode]
    python -m tools.studies.ab_study --model DIR --sizes '' --placements off,on --pairs 5 \
        --blocks 6 --out DIR          # variance components of fresh engines, per-role pinning off and on

With ``--placements off,on`` every instance group holds one engine per placement (per-role pinning,
``--perf-role-cpus``), alive together and measured in mirrored blocks, so the lever's effect is paired and a drift
cancels; each window is logged with its engine and visit, and ``components`` reports the variance components of
every arm, what a pool of its engines promises, and the bimodal TPOT (``components.json``).

A group of launches (``scenarios.group.Group``, ``Arm(launch=...)``): the reference and one candidate per size S,
all of the installed SGLang, each candidate carrying the named patch ``--patch`` (env ``PATCH``; default
``slow-decode``: GPU time before every decode step, on the critical path whatever the overlapped scheduler hides, so
its realised size is its nominal one; ``slow-scheduler``, a CPU spin in every ``Scheduler.run_batch``, which the
overlap largely hides, stays selectable), started one at a time with one KV size (``engine.group``). On the first
instance group the reference's TPOT is measured and each candidate's patch is set live to S % of it
(``EngineHandle.set_patch``, verified through the proof; ``spin_ms`` in the report, whatever the kind of delay);
later groups reuse those milliseconds. Blocks are the groups' mirrored blocks
(``judge.blocks``), so the reference and every candidate sit at the same mean position and a linear drift cancels.

A trial is ``--pairs`` consecutive fresh instance groups (``scenarios.blocks_run.measure`` with a fixed budget):
each size is judged against the reference by the A/B gate itself (``contrast_verdicts``: the instance group as the
unit, at the alpha of the gate's first look with ``--perf-ab-instances`` = pairs; with ``--history`` this host's A/A
history pooled into the variance, as the A/B does), so a trial is what one default A/B decides at its first look.
Size 0 is a candidate with a zero patch: two builds that do the same work, so its regression verdicts are false
alarms. The candidates of one instance group share its reference, unlike a production A/B pair; the table says so.
Writes ``ab_study.json`` as it goes. ``--live-check B`` first measures each sized patch on its own live engine (B
mirrored pairs of windows without and with it), so the A/B relies on a size it has seen realised;
``ab_trials`` judges the logged groups again afterwards, in trials of any size, with the A/A history of the other
groups' size-0 pairs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from engine_fixtures.engine.build import EngineBuild, with_patch
from engine_fixtures.engine.factory import EngineFactory
from engine_fixtures.engine.group import start_group
from engine_fixtures.engine.handle import EngineHandle
from engine_fixtures.isolation.cgroups import configure_parent
from engine_fixtures.isolation.pinning import cpu_split, role_placement
from engine_fixtures.judge.blocks import ratios_by_block
from engine_fixtures.judge.metrics import metric
from engine_fixtures.judge.sequential import Budget
from engine_fixtures.loadgen.stream import LoadStream
from engine_fixtures.option_values import parse_cpu_list, parse_cpus_setting
from engine_fixtures.options import Settings
from engine_fixtures.scenarios.blocks_run import ArmWindows, Judging, NullFor, contrast_verdicts, measure
from engine_fixtures.scenarios.engine import EngineScenario
from engine_fixtures.scenarios.group import Arm, Contrast, Group
from engine_fixtures.scenarios.load import SessionLoad
from engine_fixtures.scenarios.segment import SegmentPlan, measure_segment
from engine_fixtures.scenarios.timeline import Timeline
from engine_fixtures.sglang_plugin.patches import TARGETS as PATCHES
from tools.studies.components import show

PATCH_ENV = "PATCH"  # the named patch the candidates carry, unless --patch says
PATCH = "slow-decode"  # the default patch of the candidates (--patch, $PATCH)
SCENARIOS = {s.id: s for s in (EngineScenario("cuda_ipc-cache=on", transport="cuda_ipc", ipc_cache="on"),
                               EngineScenario("cpu-copy=buffer", transport="cpu", copy="buffer"),
                               EngineScenario("cpu-copy=buffer-quota", transport="cpu", copy="buffer",
                                              quota="quarter"))}
REFERENCE = "reference"


def study_group(scenario: EngineScenario, sizes: int, placements: Sequence[str] = ("off",),
                patch: str = PATCH) -> Group:
    """The reference and one candidate per size, each candidate contrasted with the reference; with several
    placements, one reference per placement (named by it), each contrasted with the first."""
    if len(placements) > 1:
        if sizes:
            raise SystemExit("--placements with more than one placement measures references only: pass --sizes ''")
        return Group(f"components/{scenario.id}", arms=tuple(Arm(p, launch=scenario) for p in placements),
                     contrasts=tuple(Contrast(f"role pinning {p} vs {placements[0]}", placements[0], p, 1.0, JUDGED,
                                              report=()) for p in placements[1:]))
    names = [f"c{i + 1}" for i in range(sizes)]
    return Group(f"ab-study/{scenario.id}",
                 arms=(Arm(REFERENCE, launch=scenario),
                       *(Arm(n, launch=scenario, build=with_patch(EngineBuild(), {patch: 0.0})) for n in names)),
                 contrasts=tuple(Contrast(f"{n} vs reference", REFERENCE, n, 1.0, JUDGED, report=()) for n in names))


def judge_trial(group: Group, windows: ArmWindows, block_unit: Sequence[int], i: int, pairs: int,
                null_for: NullFor = lambda _c, _m: None) -> dict[str, dict]:
    """Candidate ``i`` (1-based) against the reference over one trial, judged as the default A/B's first look."""
    budget = Budget(pairs, 1, 2 * pairs)
    verdicts = contrast_verdicts(group, group.contrasts[i - 1], windows, block_unit,
                                 Judging(budget.alpha_per_look(), budget.maximum, null_for=null_for))
    return {v.metric: {"status": v.status, "delta": v.delta, "catches": v.detectable} for v in verdicts}


def run(model: Path, scenario: EngineScenario, sizes: Sequence[float], pairs: int, blocks: int, budget_s: float,
        settings: Settings, out: Path, null_for: NullFor = lambda _c, _m: None, placements: Sequence[str] = ("off",),
        patch: str = PATCH, live_check: int = 0) -> dict:
    t_start = time.monotonic()
    split = cpu_split(settings.engine_cpus, settings.client_cpus)
    group = study_group(scenario, len(sizes), placements, patch)
    names = [a.name for a in group.arms]
    roles = role_placement(split.engine) if "on" in placements and split.engine else None
    if "on" in placements and roles is None:
        raise SystemExit("--placements on needs the engines pinned to a CPU set (--engine-cpus auto or a list)")
    pinned = {a.name for a in group.arms if a.name == "on" or list(placements) == ["on"]}  # "on" alone: every arm
    specs = {a.name: scenario.spec(model, settings.gpus, a.build, cpus=split.engine,
                                   role_cpus=roles if a.name in pinned else None) for a in group.arms}
    report: dict = {"scenario": scenario.id, "sizes": list(sizes), "pairs_per_trial": pairs, "blocks_per_group": blocks,
                    "window_s": settings.window_s, "warmup_s": settings.warmup_s, "cpus": split.describe(),
                    "patch": patch, "placements": list(placements),
                    "role_cpus": roles.describe() if roles is not None else None,
                    "groups": [], "trials": [], "windows": []}
    factory = EngineFactory(out / "engines", deadline_s=600.0, max_live=len(names))
    spin: list[float] = []
    once = [0.0]
    live: dict[str, EngineHandle] = {}
    with LoadStream(cpus=split.client) as stream:
        load = SessionLoad(stream, settings, split)
        timeline = Timeline()

        def start(g: int) -> None:
            for engine in live.values():
                factory.release(engine.spec)
            n = len(report["groups"])
            t0 = time.monotonic()
            with timeline.span("engine", f"group {n}"):
                engines = start_group(factory, [specs[m].with_(name=f"sglang-{m}-g{n}") for m in names])
            start_s = time.monotonic() - t0
            live.update(zip(names, engines, strict=True))
            for engine in engines:
                load.first_light(engine, scenario.workload(), timeline)
            first_light_s = time.monotonic() - t0 - start_s
            t_once = time.monotonic()
            if sizes and not spin:
                cal = [w["tpot_gmean_ms"] for w in windows_of(live[REFERENCE], 2) if "tpot_gmean_ms" in w]
                if not cal:
                    raise SystemExit("both calibration windows were refused (the GPU slowed: "
                                     "scenarios.refusal.window_refusal), so the patch cannot be sized")
                tpot = sum(cal) / len(cal)
                spin.extend(tpot * s / 100.0 for s in sizes)
                report["reference_tpot_ms"], report["spin_ms"] = tpot, list(spin)
            if live_check and "live_check" not in report:
                report["live_check"] = {str(s): live_size(live[name], ms, live_check)
                                        for name, s, ms in zip(names[1:], sizes, spin, strict=True) if ms > 0}
            once[0] += time.monotonic() - t_once  # the calibration and live check: once per study, not per group
            for name, ms in zip(names[1:] if sizes else [], spin, strict=True):
                live[name].set_patch({patch: ms})
            report["groups"].append({"instances": [e.instance for e in engines], "start_s": start_s,
                                     "first_light_s": first_light_s, "spin_ms": list(spin),
                                     "engines": {m: engine_facts(e) for m, e in zip(names, engines, strict=True)}})

        def live_size(engine: EngineHandle, ms: float, blocks: int) -> dict:
            """The patch's realised TPOT effect on one live engine, before any A/B relies on it: ``blocks``
            mirrored pairs of one window without and one with it (the order alternates, so a drift cancels)."""
            tpot: dict[bool, list[tuple[int, float]]] = {False: [], True: []}
            for b in range(blocks):
                for on in ((False, True) if b % 2 == 0 else (True, False)):
                    engine.set_patch({patch: ms if on else 0.0})
                    tpot[on] += [(b, w["tpot_gmean_ms"]) for w in windows_of(engine, 1) if "tpot_gmean_ms" in w]
            ratios = ratios_by_block("tpot_gmean_ms", [v for _, v in tpot[False]], [b for b, _ in tpot[False]],
                                     [v for _, v in tpot[True]], [b for b, _ in tpot[True]])
            if not ratios:
                raise SystemExit("the live check kept no pair of windows (refused: scenarios.refusal.window_refusal)")
            logs = [math.log(r) for r in ratios]
            return {"ms": ms, "log_ratios": logs, "realised": math.expm1(sum(logs) / len(logs))}

        def windows_of(engine: EngineHandle, n: int, requests: list | None = None) -> list[dict[str, float]]:
            plan = SegmentPlan(scenario.workload(), n, settings.window_s, settings.warmup_s, settings.sample_hz)
            return measure_segment(engine, stream, plan, timeline, engine.instance, requests=requests)

        def visit(arm: Arm, n: int, unit: int) -> list[dict[str, float]]:
            requests: list = []
            values = windows_of(live[arm.name], n, requests)
            k = len({(w["engine"], w["visit"]) for w in report["windows"]})
            g = len(report["groups"]) - 1  # (``unit`` counts within one trial)
            report["windows"].extend({"arm": arm.name, "engine": live[arm.name].instance, "group": g, "visit": k,
                                      "t_s": r["origin_s"] + r["t0_s"], "values": v, "requests": r}
                                     for v, r in zip(values, requests, strict=True))
            (out / "ab_study.json").write_text(json.dumps(report))  # a call cut short keeps every window so far
            return values

        try:
            while not report["trials"] or time.monotonic() - t_start + report["trial_s"] <= budget_s:
                t0 = time.monotonic()
                trial = measure(group, Budget.fixed(pairs), visit, lambda *_a: [], start=start, blocks_per_unit=blocks)
                # (the placements' contrast is read from the components, over every group, not per trial)
                report["trials"].append({str(s): judge_trial(group, trial.windows, trial.block_unit, i + 1, pairs,
                                                             null_for) for i, s in enumerate(sizes)})
                report["trial_s"] = time.monotonic() - t0 - once[0]  # what the next trial should take
                once[0] = 0.0
                report["elapsed_s"] = time.monotonic() - t_start
                (out / "ab_study.json").write_text(json.dumps(report, indent=1))
        finally:
            timeline.close()
            report["timeline"] = timeline.to_json()["summary"]
            factory.close()
    return report


JUDGED = ("requests_per_s", "tpot_gmean_ms", "ttft_p50_ms")


def engine_facts(engine: EngineHandle) -> dict:
    """What makes two fresh engines of one build comparable, read back from each: start time, the KV pool and
    the CUDA-graph sizes it settled on, and where its roles run."""
    cfg = engine.config
    return {"instance": engine.instance, "ready_s": engine.ready_s, "kv_tokens": cfg.max_total_num_tokens,
            "cuda_graph_max_bs": cfg.raw.get("cuda_graph_max_bs"), "cuda_graph_bs": cfg.raw.get("cuda_graph_bs"),
            "max_running_requests": cfg.max_running_requests, "pinned": {r: list(c) for r, c in engine.pinned.items()}}


def render(report: dict) -> Table:
    n = len(report["trials"])
    patch = report.get("patch", "slow-scheduler")  # a report from before --patch: the CPU spin
    table = Table(title=f"A/B detection on {report['scenario']}: {n} trial(s) of {report['pairs_per_trial']} fresh "
                        f"instance groups each (one reference shared by the candidates of a group); candidate carries "
                        f"{patch} at S% of the reference TPOT ({report.get('reference_tpot_ms', float('nan')):.2f} "
                        "ms)")
    for col in ("S", "patch ms", "realised TPOT", "realised req/s", "TPOT regression", "req/s regression",
                "TTFT p50 regression", "any judged metric regression", "undecided (TPOT)", "TPOT catches (median)"):
        table.add_column(col)
    for i, size in enumerate(report["sizes"]):
        rows = [t[str(size)] for t in report["trials"]]

        def count(m: str, status: str = "regression", rows: list = rows) -> str:
            return f"{sum(r.get(m, {}).get('status') == status for r in rows)}/{len(rows)}"

        anyreg = sum(any(v["status"] == "regression" for name, v in r.items() if metric(name).judged) for r in rows)
        realised = {m: _mean([r[m]["delta"] for r in rows if m in r]) for m in ("tpot_gmean_ms", "requests_per_s")}
        spin = report.get("spin_ms", [math.nan] * len(report["sizes"]))[i]
        catches = sorted(r["tpot_gmean_ms"]["catches"] for r in rows
                         if r.get("tpot_gmean_ms", {}).get("catches") is not None)
        table.add_row(f"{size:g}%", f"{spin:.3f}", _pct(realised["tpot_gmean_ms"]), _pct(realised["requests_per_s"]),
                      count("tpot_gmean_ms"), count("requests_per_s"), count("ttft_p50_ms"), f"{anyreg}/{len(rows)}",
                      count("tpot_gmean_ms", "inconclusive"), _pct(catches[len(catches) // 2]) if catches else "-")
    return table


def _mean(xs: Sequence[float]) -> float | None:
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    return sum(xs) / len(xs) if xs else None


def _pct(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:+.1%}"


def study_parser(doc: str | None) -> argparse.ArgumentParser:
    """The options both H200 studies share (model, scenario, placement, cgroup parent, output)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--scenario", default="cpu-copy=buffer", choices=sorted(SCENARIOS))
    ap.add_argument("--client-cpus", type=parse_cpu_list, default=None)
    ap.add_argument("--cgroup-parent", type=Path, default=None)
    ap.add_argument("--out", type=Path, required=True)
    return ap


def study_args(ap: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse, make the output folder, and place cgroup sandboxes where ``--cgroup-parent`` says."""
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.cgroup_parent is not None:
        configure_parent(args.cgroup_parent)
    return args


def main(argv: Sequence[str] | None = None) -> None:
    ap = study_parser(__doc__)
    ap.add_argument("--sizes", default="0,5,10,20")
    ap.add_argument("--pairs", type=int, default=3, help="engine groups per trial (the A/B's instance pairs)")
    ap.add_argument("--blocks", type=int, default=2, help="mirrored blocks per instance group (--perf-ab-blocks)")
    ap.add_argument("--budget-s", type=float, default=540.0, help="start no group that would end past this")
    ap.add_argument("--window-s", type=float, default=3.0)
    ap.add_argument("--warmup-s", type=float, default=0.5)
    ap.add_argument("--engine-cpus", type=parse_cpus_setting, default="auto")
    ap.add_argument("--placements", default="off", help="per-role pinning of the references: 'off', or 'off,on' "
                    "for one engine of each per instance group (variance components; --sizes '')")
    ap.add_argument("--patch", default=os.environ.get(PATCH_ENV) or PATCH, choices=sorted(PATCHES),
                    help=f"the candidates' named patch (default: ${PATCH_ENV}, else {PATCH})")
    ap.add_argument("--live-check", type=int, default=0, metavar="BLOCKS",
                    help="on the first group, measure each sized patch's realised TPOT effect on its live engine over "
                         "BLOCKS mirrored pairs of windows without and with it, before the A/B relies on its size")
    args = study_args(ap, argv)
    settings = Settings(window_s=args.window_s, warmup_s=args.warmup_s, engine_cpus=args.engine_cpus,
                        client_cpus=args.client_cpus)
    report = run(args.model, SCENARIOS[args.scenario], [float(s) for s in args.sizes.split(",") if s], args.pairs,
                 args.blocks, args.budget_s, settings, args.out, placements=args.placements.split(","),
                 patch=args.patch, live_check=args.live_check)
    console = Console(width=240)
    if report["sizes"]:
        console.print(render(report))
    show(report, args.out, console)

if __name__ == "__main__":
    main()

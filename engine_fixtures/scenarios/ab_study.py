"""How sensitive is the paired A/B gate on a real engine? Inject slowdowns of known size and count detections.

    python -m engine_fixtures.scenarios.ab_study --model DIR --scenario cpu-copy=buffer-quota --sizes 0,10,20 \\
        --pairs 3 --budget-s 540 --out DIR [--engine-cpus 0-11 --client-cpus 12-15]

Each group starts, concurrently, fresh engines of the installed SGLang: the reference and one candidate per size
S, each candidate carrying the named patch ``slow-scheduler`` (a CPU spin in every ``Scheduler.run_batch``). On
the first group the reference's TPOT is measured and each candidate's spin is set live to S % of it
(``EngineHandle.set_patch``, verified through the proof); later groups reuse those milliseconds. A block measures
one-window segments in the mirrored order R C1 .. Ck Ck .. C1 R, so the reference and every candidate sit at the
same mean position and a linear drift cancels; each block gives every size one paired effect (``block_effects``).

A trial is ``--pairs`` consecutive groups: for each size its blocks are judged by the A/B gate itself
(``runs.judge_blocks`` with the engine pair as the unit, at the alpha of the gate's first look with
``--perf-ab-instances`` = pairs), so a trial is what one default A/B run decides at its first look; a trial left
undecided there is counted as undecided, not as a detection. Size 0 is a candidate with a zero spin: two builds
that do the same work, so its regression verdicts are false alarms. Trials of one group of engines share the
reference, unlike a production A/B pair; this is said in the table. Writes ``ab_study.json`` as it goes.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from engine_fixtures.engine.build import EngineBuild, with_patch
from engine_fixtures.engine.factory import EngineFactory
from engine_fixtures.isolation.cgroups import configure_parent
from engine_fixtures.isolation.pinning import cpu_split
from engine_fixtures.judge.metrics import metric
from engine_fixtures.judge.sequential import Budget
from engine_fixtures.loadgen.stream import LoadStream
from engine_fixtures.options import Settings, parse_cpu_list, parse_cpus_setting
from engine_fixtures.scenarios.engine import EngineScenario
from engine_fixtures.scenarios.runs import SessionLoad, judge_blocks
from engine_fixtures.scenarios.timeline import Timeline

PATCH = "slow-scheduler"
SCENARIOS = {s.id: s for s in (EngineScenario("cuda_ipc-cache=on", transport="cuda_ipc", ipc_cache="on"),
                               EngineScenario("cpu-copy=buffer", transport="cpu", copy="buffer"),
                               EngineScenario("cpu-copy=buffer-quota", transport="cpu", copy="buffer",
                                              quota="quarter"))}


def mirrored(k: int) -> list[int]:
    """Block order over the reference (0) and candidates 1..k: 0 1 .. k k .. 1 0."""
    return [0, *range(1, k + 1), *range(k, 0, -1), 0]


def size_blocks(block: Sequence[tuple[int, dict[str, float]]], i: int) -> list[tuple[str, dict[str, float]]]:
    """Candidate ``i``'s view of a mirrored block: the reference's windows as A, its own as B."""
    return [("A" if who == 0 else "B", w) for who, w in block if who in (0, i)]


def judge_trial(blocks: Sequence[Sequence[tuple[int, dict[str, float]]]], groups: Sequence[int], i: int,
                pairs: int) -> dict[str, dict]:
    """Candidate ``i`` against the reference over one trial's blocks, judged as the default A/B's first look."""
    budget = Budget(pairs, 1, 2 * pairs)
    verdicts = judge_blocks([size_blocks(b, i) for b in blocks], budget.maximum, budget.alpha_per_look(), None,
                            list(groups))
    return {v.metric: {"status": v.status, "delta": v.delta} for v in verdicts}


def run(model: Path, scenario: EngineScenario, sizes: Sequence[float], pairs: int, blocks: int, budget_s: float,
        settings: Settings, out: Path) -> dict:
    t_start = time.monotonic()
    split = cpu_split(settings.engine_cpus, settings.client_cpus)
    k = len(sizes)
    mem = min(0.3, 0.8 / (k + 1))
    ref_spec = scenario.spec(model, settings.gpus, EngineBuild(), mem, cpus=split.engine)
    cand_specs = [scenario.spec(model, settings.gpus, with_patch(EngineBuild(), {PATCH: 0.0}), mem, cpus=split.engine)
                  for _ in sizes]
    report: dict = {"scenario": scenario.id, "sizes": list(sizes), "pairs_per_trial": pairs, "blocks_per_group": blocks,
                    "window_s": settings.window_s, "warmup_s": settings.warmup_s, "cpus": split.describe(),
                    "groups": [], "trials": []}
    factory = EngineFactory(out / "engines", deadline_s=600.0, max_live=k + 1)
    spin: list[float] | None = None
    g = 0
    with LoadStream(cpus=split.client) as stream:
        load = SessionLoad(stream, settings, split)
        try:
            while True:
                elapsed = time.monotonic() - t_start
                per_group = (elapsed / g) if g else 0.0
                if g and elapsed + per_group > budget_s:
                    break
                timeline = Timeline()
                specs = [ref_spec.with_(name=f"sglang-ref{g}")] + [c.with_(name=f"sglang-c{j}g{g}")
                                                                    for j, c in enumerate(cand_specs)]
                with timeline.span("engine", f"group {g}"):
                    engines = factory.get_many(specs)
                if spin is None:
                    cal = load.windows(engines[0], scenario, 2, timeline)
                    tpot = sum(w["tpot_p50_ms"] for w in cal) / len(cal)
                    spin = [tpot * s / 100.0 for s in sizes]
                    report["reference_tpot_ms"] = tpot
                    report["spin_ms"] = spin
                for engine, ms in zip(engines[1:], spin, strict=True):
                    engine.set_patch({PATCH: ms})
                group_blocks = []
                for _ in range(blocks):
                    group_blocks.append([(who, load.windows(engines[who], scenario, 1, timeline)[0])
                                         for who in mirrored(k)])
                with timeline.span("stop", "stop group"):
                    for spec in specs:
                        factory.release(spec)
                timeline.close()
                report["groups"].append({"blocks": group_blocks, "instances": [e.instance for e in engines],
                                         "timeline": timeline.to_json()["summary"]})
                g += 1
                if g % pairs == 0:
                    trial_groups = report["groups"][g - pairs:g]
                    flat = [b for grp in trial_groups for b in grp["blocks"]]
                    ids = [j for j, grp in enumerate(trial_groups) for _ in grp["blocks"]]
                    report["trials"].append({str(s): judge_trial(flat, ids, i + 1, pairs) for i, s in enumerate(sizes)})
                report["elapsed_s"] = time.monotonic() - t_start
                (out / "ab_study.json").write_text(json.dumps(report, indent=1))
        finally:
            factory.close()
    return report


JUDGED = ("requests_per_s", "tpot_p50_ms", "ttft_p50_ms")


def render(report: dict) -> Table:
    n = len(report["trials"])
    table = Table(title=f"A/B detection on {report['scenario']}: {n} trial(s) of {report['pairs_per_trial']} fresh "
                        f"engine groups each (one reference shared by the candidates of a group); candidate spins S% "
                        f"of the reference TPOT ({report.get('reference_tpot_ms', float('nan')):.2f} ms) per "
                        "scheduler step")
    for col in ("S", "spin ms", "realised TPOT", "realised req/s", "TPOT regression", "req/s regression",
                "TTFT p50 regression", "any judged metric regression", "undecided (TPOT)"):
        table.add_column(col)
    for i, size in enumerate(report["sizes"]):
        rows = [t[str(size)] for t in report["trials"]]

        def count(m: str, status: str = "regression", rows: list = rows) -> str:
            return f"{sum(r.get(m, {}).get('status') == status for r in rows)}/{len(rows)}"

        anyreg = sum(any(v["status"] == "regression" for name, v in r.items() if metric(name).judged) for r in rows)
        realised = {m: _mean([r[m]["delta"] for r in rows if m in r]) for m in ("tpot_p50_ms", "requests_per_s")}
        spin = report.get("spin_ms", [math.nan] * len(report["sizes"]))[i]
        table.add_row(f"{size:g}%", f"{spin:.3f}", _pct(realised["tpot_p50_ms"]), _pct(realised["requests_per_s"]),
                      count("tpot_p50_ms"), count("requests_per_s"), count("ttft_p50_ms"), f"{anyreg}/{len(rows)}",
                      count("tpot_p50_ms", "inconclusive"))
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
    ap.add_argument("--scenario", default="cpu-copy=buffer-quota", choices=sorted(SCENARIOS))
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
    ap.add_argument("--sizes", default="0,10,20")
    ap.add_argument("--pairs", type=int, default=3, help="engine groups per trial (the A/B's instance pairs)")
    ap.add_argument("--blocks", type=int, default=1, help="mirrored blocks per group")
    ap.add_argument("--budget-s", type=float, default=540.0, help="start no group that would end past this")
    ap.add_argument("--window-s", type=float, default=3.0)
    ap.add_argument("--warmup-s", type=float, default=0.5)
    ap.add_argument("--engine-cpus", type=parse_cpus_setting, default="auto")
    args = study_args(ap, argv)
    settings = Settings(window_s=args.window_s, warmup_s=args.warmup_s, engine_cpus=args.engine_cpus,
                        client_cpus=args.client_cpus)
    report = run(args.model, SCENARIOS[args.scenario], [float(s) for s in args.sizes.split(",")], args.pairs,
                 args.blocks, args.budget_s, settings, args.out)
    Console(width=220).print(render(report))


if __name__ == "__main__":
    main()

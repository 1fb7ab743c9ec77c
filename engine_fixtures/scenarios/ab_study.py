"""How sensitive is the paired A/B gate on a real engine? Inject slowdowns of known size and count detections.

    python -m engine_fixtures.scenarios.ab_study --model DIR --scenario cuda_ipc-cache=on \\
        --sizes 0,5,10,20 --blocks 12 --trial-blocks 4 --window-requests 32 --out DIR

Two engines of the installed SGLang share the GPU: the reference, and a candidate carrying the named patch
``slow-scheduler`` (a CPU spin in every ``Scheduler.run_batch``). The reference's TPOT is measured first;
for each size S (percent) the candidate's spin is set live to S % of that TPOT (``EngineHandle.set_patch``,
verified through the proof), then ``--blocks`` ABBA blocks are measured. Every run of ``--trial-blocks``
consecutive blocks is one trial, judged by the gate's own sequential rule (first look after 3 blocks, one
more block per look, budget = trial blocks): the detection rate per size is the share of trials judged
``regression`` (size 0 is two identical builds: the false-alarm rate). All blocks of a size together are
also judged as one long comparison. The realised change is what the long comparison measured.
Writes ``ab_study.json`` and prints the table.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from engine_fixtures.engine.build import EngineBuild, with_patch
from engine_fixtures.engine.factory import EngineFactory
from engine_fixtures.judge.sequential import Budget, measure_until_decided
from engine_fixtures.scenarios.engine import EngineScenario
from engine_fixtures.scenarios.runs import judge_blocks
from engine_fixtures.scenarios.window import measure_window

METRICS = ("tpot_p50_ms", "requests_per_s", "output_tokens_per_s", "ttft_p50_ms")
PATCH = "slow-scheduler"
SCENARIOS = {s.id: s for s in (EngineScenario("cuda_ipc-cache=on", transport="cuda_ipc", ipc_cache="on"),
                               EngineScenario("cpu-copy=buffer", transport="cpu", copy="buffer"),
                               EngineScenario("cpu-copy=buffer-quota", transport="cpu", copy="buffer",
                                              quota="quarter"))}


def trial_statuses(blocks: Sequence[list], trial_blocks: int) -> list[dict[str, str]]:
    """Each run of ``trial_blocks`` consecutive blocks judged with the sequential rule (3 blocks, +1 per look)."""
    out = []
    for start in range(0, len(blocks) - trial_blocks + 1, trial_blocks):
        chunk = blocks[start:start + trial_blocks]
        budget = Budget(min(3, trial_blocks), 1, trial_blocks)
        seen: list = []
        last: dict[str, str] = {}

        def measure(n: int, chunk: Sequence[list] = chunk, seen: list = seen) -> None:
            seen.extend(chunk[len(seen):len(seen) + n])

        def undecided(alpha: float, seen: list = seen, last: dict = last, cap: int = trial_blocks) -> list[str]:
            verdicts = judge_blocks(seen, cap, alpha, None)
            last.clear()
            last.update({v.metric: v.status for v in verdicts})
            return [v.metric for v in verdicts if v.status == "inconclusive"]

        measure_until_decided(budget, measure, undecided)
        out.append(dict(last))
    return out


def run(model: Path, scenario: EngineScenario, sizes: Sequence[float], blocks: int, trial_blocks: int,
        window_requests: int, out: Path, gpus: tuple[int, ...] = (0,)) -> dict:
    workload = scenario.workload(window_requests)
    ref_spec = scenario.spec(model, gpus, EngineBuild(), 0.3)
    cand_spec = scenario.spec(model, gpus, with_patch(EngineBuild(), {PATCH: 0.0}), 0.3).with_(name="sglang-candidate")
    report: dict = {"scenario": scenario.id, "window_requests": window_requests, "blocks": blocks,
                    "trial_blocks": trial_blocks, "sizes": {}}
    factory = EngineFactory(out / "engines", deadline_s=900.0, max_live=2)
    try:
        ref, cand = factory.get(ref_spec), factory.get(cand_spec)
        calib = [measure_window(ref, workload, proof=False) for _ in range(2)]
        tpot = sum(w["tpot_p50_ms"] for w in calib) / len(calib)
        report["reference_tpot_ms"] = tpot
        for size in sizes:
            spin = tpot * size / 100.0
            cand.set_patch({PATCH: spin})
            seq: list = []
            for b in range(blocks):
                order = "ABBA" if b % 2 == 0 else "BAAB"
                seq.append([(who, measure_window(ref if who == "A" else cand, workload, proof=False))
                            for who in order])
            long = {v.metric: v for v in judge_blocks(seq, blocks, Budget.fixed(blocks).alpha_per_look(), None)}
            trials = trial_statuses(seq, trial_blocks)
            report["sizes"][str(size)] = {
                "spin_ms": spin,
                "long": {m: {"status": long[m].status, "delta": long[m].delta, "detectable": long[m].detectable}
                         for m in METRICS if m in long},
                "trials": [{m: t.get(m) for m in METRICS} for t in trials],
                "windows": [[who, w] for blk in seq for who, w in blk]}
            (out / "ab_study.json").write_text(json.dumps(report, indent=1))
    finally:
        factory.close()
    return report


def render(report: dict) -> Table:
    table = Table(title=f"A/B detection on {report['scenario']}: candidate spins S% of the reference TPOT "
                        f"({report['reference_tpot_ms']:.2f} ms) per scheduler step; trials of "
                        f"{report['trial_blocks']} ABBA blocks")
    for col in ("S", "spin ms", "realised TPOT", "realised req/s", "TPOT flagged", "req/s flagged", "long run"):
        table.add_column(col)
    for size, row in report["sizes"].items():
        trials = row["trials"]

        def rate(metric: str, trials: list = trials) -> str:
            hits = sum(t.get(metric) == "regression" for t in trials)
            other = sum(t.get(metric) not in ("regression", "pass") for t in trials)
            return f"{hits}/{len(trials)}" + (f" ({other} undecided)" if other else "")

        long = row["long"]
        realised = {m: long.get(m, {}).get("delta") for m in ("tpot_p50_ms", "requests_per_s")}
        summary = ", ".join(f"{m} {v['status']}" for m, v in long.items() if m in ("tpot_p50_ms", "requests_per_s"))
        table.add_row(size, f"{row['spin_ms']:.3f}", _pct(realised["tpot_p50_ms"]), _pct(realised["requests_per_s"]),
                      rate("tpot_p50_ms"), rate("requests_per_s"), summary)
    return table


def _pct(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:+.1%}"


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--scenario", default="cuda_ipc-cache=on", choices=sorted(SCENARIOS))
    ap.add_argument("--sizes", default="0,5,10,20")
    ap.add_argument("--blocks", type=int, default=12)
    ap.add_argument("--trial-blocks", type=int, default=4)
    ap.add_argument("--window-requests", type=int, default=32)
    ap.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp(prefix="ab-study-")))
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    report = run(args.model, SCENARIOS[args.scenario], [float(s) for s in args.sizes.split(",")], args.blocks,
                 args.trial_blocks, args.window_requests, args.out)
    Console(width=200).print(render(report))


if __name__ == "__main__":
    main()

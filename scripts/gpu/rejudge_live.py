"""Judge a live group's contrasts again from a results file's stored windows, with the suite's own judge.

    python scripts/gpu/rejudge_live.py RESULTS.json MODULE GROUP [--cores N]

MODULE names the test module that declares the group (e.g. perf_tests.sglang.gpu_tier.seed_matrix) and GROUP its
attribute (CPU, IPC). Each arm's windows come back from its result (``RunResult.block_windows``), arms with
``threads="quota"`` are resolved for a quota of N cores (the run's; default 4, the H200's), and every contrast is
judged by ``scenarios.blocks_run.contrast_verdicts`` at the run's own per-look alpha and budget.
Nothing is measured. Used for the H200 nightly of 2026-12-03, whose capped-thread contrast was measured but whose
test lost its verdicts to a bug fixed since (docs/results/h200-nightly-2026-12-03).
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

from engine_fixtures.scenarios.blocks_run import Judging, contrast_verdicts
from engine_fixtures.store.results import ResultsFile


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", type=Path)
    ap.add_argument("module")
    ap.add_argument("group")
    ap.add_argument("--cores", type=float, default=4.0)
    args = ap.parse_args()
    group = getattr(importlib.import_module(args.module), args.group).resolved(lambda _a: args.cores)
    windows, meta = {}, {}
    for r in ResultsFile.load(args.results).results:
        if r.metadata.get("live_group") != group.id:
            continue
        windows[r.metadata["live_arm"]] = tuple(r.block_windows())
        meta = r.metadata
    if not windows:
        raise SystemExit(f"{args.results}: no result of live group {group.id}")
    print(f"{group.id}: {meta['blocks']} blocks, alpha per look {meta['alpha_per_look']}, "
          f"budget {meta['budget_blocks']}")
    for c in group.contrasts:
        blocks = range(int(meta["blocks"]))  # one engine: each block is its own unit
        for v in contrast_verdicts(group, c, windows, blocks, Judging(meta["alpha_per_look"], meta["budget_blocks"])):
            catches = "-" if v.detectable is None else f"{v.detectable:.3g}"
            print(f"| {c.label} | {v.metric} | {v.change_text(v.delta)} | {catches} | {v.windows} | {v.status} |")
            print(f"    {v.message}")


if __name__ == "__main__":
    main()

"""The gate GPU busy now has, judged on the 10 Hz poll of earlier runs (the "before" estimator): every window's
``gpu_util_mean`` read as if it were ``gpu_util_buffer_mean``, every contrast of the group judged by the suite's own
``contrast_verdicts`` at the run's per-look alpha and budget. Nothing is measured.

    python docs/results/h200-issue46-2026-12-06/poll_as_gate.py MODULE GROUP RESULTS.json [RESULTS.json ...]
"""

from __future__ import annotations

import importlib
import sys

from engine_fixtures.scenarios.blocks_run import Judging, contrast_verdicts
from engine_fixtures.store.results import ResultsFile

BUFFER, POLL = "gpu_util_buffer_mean", "gpu_util_mean"


def main(module: str, name: str, paths: list[str]) -> None:
    group = getattr(importlib.import_module(module), name).resolved(lambda _a: 4.0)
    for path in paths:
        windows, meta = {}, {}
        for r in ResultsFile.load(path).results:
            if r.metadata.get("live_group") != group.id:
                continue
            windows[r.metadata["live_arm"]] = tuple(
                (b, {k: v for k, v in w.items() if k != BUFFER} | ({BUFFER: w[POLL]} if POLL in w else {}))
                for b, w in r.block_windows())
            meta = r.metadata
        print(f"== {path}: {meta['blocks']} blocks")
        for c in group.contrasts:
            for v in contrast_verdicts(group, c, windows, range(int(meta["blocks"])),
                                       Judging(meta["alpha_per_look"], meta["budget_blocks"])):
                if v.metric == BUFFER:
                    catches = "-" if v.detectable is None else f"{v.detectable:.1%}"
                    print(f"| {c.label} | poll as the gate | {v.change_text(v.delta)} | {catches} | {v.status} |")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])

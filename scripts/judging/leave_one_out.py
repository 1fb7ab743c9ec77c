"""Whole-run verdicts of a committed pool's own clean runs, each judged against the others (leave one out), with
the gate as it runs: ``judge_result`` at the default budget's alpha per look, split over the scenario's gates.

    python scripts/judging/leave_one_out.py baselines/<machine key>/<scenario file>.json

Prints per run the gating rows that were not ``pass`` and the count of runs that would have gone red.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

from engine_fixtures.judge.sequential import Budget
from engine_fixtures.judge.verdicts import judge_result
from engine_fixtures.options import OPTIONS_BY_NAME
from engine_fixtures.store.baselines import Baseline


def main(path: str) -> int:
    pool = Baseline.from_json(json.loads(Path(path).read_text()))
    n, most = OPTIONS_BY_NAME["repeats"].default, OPTIONS_BY_NAME["max_repeats"].default
    alpha = Budget(n, n, most).alpha_per_look()
    red = flagged = 0
    for i, run in enumerate(pool.runs):
        others = replace(pool, runs=tuple(r for j, r in enumerate(pool.runs) if j != i))
        rows = [v for v in judge_result(run.samples, others, scenario=pool.scenario, alpha=alpha) if v.is_verdict]
        bad = [f"{v.metric} {v.status}" for v in rows if v.status != "pass"]
        red += bool(bad)
        flagged += any(v.status in ("regression", "improvement") for v in rows)
        print(f"run {i + 1} ({run.run_id}): {len(rows)} gating rows; " + ("; ".join(bad) or "all pass"))
    print(f"{pool.scenario}: {red} of {len(pool.runs)} clean runs red in strict mode, {flagged} of them by a "
          "regression or improvement (a false alarm)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))

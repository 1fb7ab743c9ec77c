"""What a pool of K runs of the GPU tier promises, from K real runs of one host (issue 44): the arms' ``rel.*`` rows
(each arm over its live group's control, in the same blocks) beside the levels.

    python -m tools.studies.pool_promise RUN1/results-*.json RUN2/... [--skip-first 1] [--out DIR]

Each results file is one pytest session (one run: a fresh engine, minutes after the one before). Per arm and gated
metric, on the judged scale (log: an sd reads as a CV): the spread of the run means, what a pool of K = 3, 5 and 10
such runs promises (``judge.decide.promised_size`` at the gate's alpha, the formula ``perf-baseline show`` prints:
``components.pool_promises``) and, from four runs, each run judged against a pool of the others
(``components.leave_one_out``). A promise from few runs carries few degrees of freedom; the table says how many.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from engine_fixtures.judge.blocks import ratios_by_block
from engine_fixtures.judge.metrics import REL_PREFIX, metric
from engine_fixtures.store.results import BLOCK_KEY, SAMPLE_WINDOWS_KEY
from tools.studies.components import POOL_SIZES, leave_one_out, pool_promises

LEVELS = ("requests_per_s", "ttft_p50_ms", "tpot_gmean_ms")
METRICS = (*LEVELS, *(REL_PREFIX + m for m in LEVELS))


def _rel(results: Sequence[Mapping[str, Any]], control: str) -> dict[str, dict[str, tuple[float, ...]]]:
    """``rel.*`` samples rebuilt from the windows of a run that predates them: each live arm over ``control`` per
    block both measured (``judge.blocks.ratios_by_block``, what the runner records)."""
    by_arm = {r["metadata"].get("live_arm"): r for r in results if r.get("metadata", {}).get("live_arm")}
    if control not in by_arm:
        return {}
    ctl = by_arm[control]
    out: dict[str, dict[str, tuple[float, ...]]] = {}
    for arm, r in by_arm.items():
        if arm == control:
            continue
        for m in LEVELS:
            ratios = ratios_by_block(m, ctl["samples"].get(m, ()), _blocks(ctl, m), r["samples"].get(m, ()),
                                     _blocks(r, m))
            if ratios:
                out.setdefault(arm, {})[REL_PREFIX + m] = ratios
    return out


def _blocks(r: Mapping[str, Any], m: str) -> list[int]:
    meta = r["metadata"]
    blocks = meta[BLOCK_KEY]
    idx = meta.get(SAMPLE_WINDOWS_KEY, {}).get(m)
    return [blocks[i] for i in idx] if idx is not None else list(blocks)


def runs_by_arm(paths: Sequence[Path], skip_first: int = 0,
                control: str | None = None) -> dict[str, dict[str, list[list[float]]]]:
    """Per arm and metric, one list of samples per results file (in the order given), less the first
    ``skip_first`` files (a fresh host's first runs); with ``control``, ``rel.*`` rebuilt where a run lacks them."""
    out: dict[str, dict[str, list[list[float]]]] = {}
    for path in list(paths)[skip_first:]:
        results = json.loads(Path(path).read_text())["results"]
        rebuilt = _rel(results, control) if control else {}
        for r in results:
            meta = r.get("metadata", {})
            if meta.get("live_arm") in rebuilt and not any(k.startswith(REL_PREFIX) for k in r["samples"]):
                r = {**r, "samples": {**r["samples"], **rebuilt[meta["live_arm"]]}}
            arm = (f"{meta.get('live_group') or meta.get('group')}/{meta.get('live_arm') or meta.get('group_member')}"
                   if meta.get("live_arm") or meta.get("group_member") else r["scenario"])
            for name in METRICS:
                values = [float(v) for v in r["samples"].get(name, ()) if v is not None and math.isfinite(v)]
                if values:
                    out.setdefault(arm, {}).setdefault(name, []).append(values)
    return out


def rows(data: Mapping[str, Mapping[str, list[list[float]]]]) -> list[dict[str, Any]]:
    out = []
    for scenario, metrics in sorted(data.items()):
        for name, runs in metrics.items():
            if len(runs) < 2:
                continue
            m = metric(name)
            means = [float(np.mean(m.scale.forward(r))) for r in runs]
            flags, judged, catches = leave_one_out(m, runs)
            out.append({"scenario": scenario, "metric": name, "runs": len(runs),
                        "level": float(np.exp(np.mean(means))) if m.scale.name == "log" else float(np.mean(means)),
                        "run_means_sd": float(np.std(means, ddof=1)),
                        "promise": {str(k): v for k, v in pool_promises(m, runs).items()},
                        "loo_flags": flags, "loo_judged": judged, "loo_catches": catches})
    return out


def render(found: Sequence[Mapping[str, Any]]) -> Table:
    t = Table("arm", "metric", "runs", "level", "sd of run means", *(f"pool of {k}" for k in POOL_SIZES),
              "leave-one-out: flags / catches", title="What a pool of K runs promises (worse change caught)")
    for r in found:
        loo = (f"{r['loo_flags']}/{r['loo_judged']}, " + (f"{r['loo_catches']:.1%}" if r["loo_catches"] else "-")
               if r["loo_judged"] else "-")
        t.add_row(r["scenario"], r["metric"],
                  str(r["runs"]), f"{r['level']:.4g}", f"{r['run_means_sd']:.1%}",
                  *(f"{r['promise'][str(k)]:.1%}" for k in POOL_SIZES), loo)
    return t


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", nargs="+", type=Path)
    p.add_argument("--skip-first", type=int, default=0, metavar="N")
    p.add_argument("--control", metavar="ARM", help="rebuild rel.* over this live arm where a run predates them")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    found = rows(runs_by_arm(args.results, args.skip_first, args.control))
    Console(width=200).print(render(found))
    if args.out:
        (args.out / "pool_promise.json").write_text(json.dumps(found, indent=1) + "\n")


if __name__ == "__main__":
    main()

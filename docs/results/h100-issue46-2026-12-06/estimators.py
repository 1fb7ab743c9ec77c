"""Per-block sd of the GPU-busy estimators and of the CPU families, both estimators from the same windows of one run.

    python docs/results/h100-issue46-2026-12-06/estimators.py RESULTS.json [RESULTS.json ...]

For every pair of arms of a live group served in the same blocks (candidate vs reference, as the nightly's contrasts
read them) and each metric: the mean per-block effect and its sd, on the log scale (% of the reference, as the suite
judges GPU busy, the shares and the CPU per request) and, for the two GPU estimators, in points too. "poll" is
``gpu_util_mean`` (NVML's last-period average polled at 10 Hz), "buffer" ``gpu_util_buffer_mean`` (each period of
NVML's sample buffer once), ``gpu_sm_util.<role>`` the SM share of a role's processes from NVML's per-process
buffer; ``periods`` is the buffer's periods per window (its sample rate).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from itertools import combinations

import numpy as np

from engine_fixtures.judge.blocks import effects_by_block

PAIRS = {("stock", "buffer"), ("torch", "buffer"), ("stock-capped", "buffer"), ("stock", "on"), ("off", "on")}
LOG = ("requests_per_s", "tpot_gmean_ms", "ttft_p50_ms", "gpu_util_mean", "gpu_util_buffer_mean",
       "gpu_sm_util.scheduler", "gpu_sm_util.http_server", "cpu_share_of_quota.http_server",
       "cpu_s_per_request.http_server", "cpu_share_of_quota.scheduler", "cpu_s_per_request.scheduler")
POINTS = ("gpu_util_mean", "gpu_util_buffer_mean", "gpu_sm_util.scheduler", "gpu_sm_util.http_server")


def arms(path: str) -> dict[str, dict]:
    out = {}
    with open(path) as f:
        results = json.load(f)["results"]
    for r in results:
        live = r["metadata"].get("live_arm")
        if live and "window_block" in r["metadata"]:
            out[live] = r
    return out


def series(r: dict, name: str) -> tuple[list[float], list[int]]:
    values, blocks = r["samples"].get(name, []), r["metadata"]["window_block"]
    return list(values), list(blocks[:len(values)]) if len(values) == len(blocks) else []


def main(paths: list[str]) -> None:
    for path in paths:
        by = arms(path)
        print(f"== {path}")
        for a, b in combinations(sorted(by), 2):
            cand, ref = (a, b) if (a, b) in PAIRS else (b, a)
            if (cand, ref) not in PAIRS:
                continue
            print(f"  {cand} vs {ref}")
            for name in LOG:
                rv, rb = series(by[ref], name)
                cv, cb = series(by[cand], name)
                if not rb or not cb:
                    continue
                e = effects_by_block("requests_per_s", rv, rb, cv, cb)  # log ratio per block
                line = (f"    {name:34s} {np.mean(rv):8.4g} -> {np.mean(cv):8.4g}  blocks {len(e):2d}  "
                        f"log effect {100 * np.mean(e):+6.1f} %  sd {100 * np.std(e, ddof=1):5.1f} %")
                if name in POINTS:
                    p = effects_by_block("gpu_util_mean", rv, rb, cv, cb)
                    line += f"  | points {np.mean(p):+6.2f}  sd {np.std(p, ddof=1):5.2f}"
                print(line)
        periods = defaultdict(list)
        for arm, r in by.items():
            periods[arm] = r["samples"].get("gpu_util_buffer_periods", [])
        shown = {a: f"{np.mean(v):.1f}" for a, v in periods.items() if v}
        print(f"  buffer periods per window (mean): {shown or 'none recorded'}")
        window = {a: r["metadata"].get("window_s") for a, r in by.items()}
        print(f"  window_s: {sorted(set(window.values()), key=str)}")


if __name__ == "__main__":
    main(sys.argv[1:])

"""Does switching arms live on one engine measure what separate launches measure? One contrast, both ways.

    python3 -m tools.studies.live_vs_separate RESULTS.json [SEPARATE_RESULTS.json] [--group copy-pair]
        [--reference torch --candidate buffer] [--between requests_per_s=0.043,ttft_p50_ms=0.045,tpot_p50_ms=0.031]

RESULTS is a run of ``tools/studies/test_live_vs_separate.py``: one fresh engine per copy arm, and
the live group's arms as results filed under ``.../live`` with the mirrored block of every window (the separate
engines may also come from another results file of the same host). For each metric it
prints the live paired ratio (candidate over reference) with its 95 % interval from the per-block effects, and the
separate-launch ratio with the 95 % interval a comparison of two fresh engines has: each engine's window mean
error plus the between-engine spread of a fresh start, ``--between`` (relative sd per metric; the default is what
four fresh 4B engines of one build showed on an H200, ../shared/reference/h200-2026-12-01-evening.md section 4,
since one run with one engine per arm cannot measure it). The two agree when the live ratio lies inside the
separate engines' interval.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
from scipy import stats

from engine_fixtures.judge.blocks import effects_by_block
from engine_fixtures.store.results import BLOCK_KEY, ResultsFile, RunResult

BETWEEN = "requests_per_s=0.043,ttft_p50_ms=0.045,tpot_p50_ms=0.031"


def live_arm(f: ResultsFile, group: str, arm: str) -> RunResult:
    for r in f.results:
        if r.metadata.get("live_group") == group and r.metadata.get("live_arm") == arm:
            return r
    raise SystemExit(f"no arm {arm!r} of live group {group!r} in the live results")


def separate_arm(f: ResultsFile, copy: str) -> RunResult:
    for r in f.results:
        if r.arm.get("copy") == copy and not r.scenario.endswith("/live"):
            return r
    raise SystemExit(f"no separately launched copy={copy} engine in the separate results")


def live_ratio(ref: RunResult, cand: RunResult, name: str) -> tuple[float, float, float, int]:
    def paired(r: RunResult) -> tuple[list[float], list[int]]:
        blocks = r.aligned(BLOCK_KEY, name)  # the block of each window that has the metric
        if blocks is None:
            raise SystemExit(f"{r.scenario}: the windows of {name} cannot be lined up with their blocks (a result "
                             "written before sparse metrics named their windows)")
        return list(r.samples[name]), [int(b) for b in blocks]

    (a, ab), (b, bb) = paired(ref), paired(cand)
    e = np.asarray(effects_by_block(name, a, ab, b, bb))
    half = stats.t.ppf(0.975, e.size - 1) * e.std(ddof=1) / math.sqrt(e.size)
    return math.exp(e.mean()), math.exp(e.mean() - half), math.exp(e.mean() + half), e.size


def separate_ratio(ref: RunResult, cand: RunResult, name: str, between: float) -> tuple[float, float, float]:
    a, b = np.log(ref.samples[name]), np.log(cand.samples[name])
    var = a.var(ddof=1) / a.size + b.var(ddof=1) / b.size + 2 * between**2
    half = 1.96 * math.sqrt(var)
    d = b.mean() - a.mean()
    return math.exp(d), math.exp(d - half), math.exp(d + half)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("live", type=Path)
    p.add_argument("separate", type=Path, nargs="?")
    p.add_argument("--group", default="copy-pair")
    p.add_argument("--reference", default="torch")
    p.add_argument("--candidate", default="buffer")
    p.add_argument("--between", default=BETWEEN)
    a = p.parse_args(argv)
    between = {k: float(v) for k, v in (kv.split("=") for kv in a.between.split(","))}
    live = ResultsFile.load(a.live)
    sep = ResultsFile.load(a.separate) if a.separate else live
    lref, lcand = live_arm(live, a.group, a.reference), live_arm(live, a.group, a.candidate)
    sref, scand = separate_arm(sep, a.reference), separate_arm(sep, a.candidate)
    print(f"{a.candidate} over {a.reference}: live on one engine ({lref.scenario}) vs separate engines")
    print("| metric | live ratio (95% CI, blocks) | separate ratio (95% interval incl. between-engine sd) | agree |")
    print("|---|---|---|---|")
    for name, sd in between.items():
        r, lo, hi, n = live_ratio(lref, lcand, name)
        s, slo, shi = separate_ratio(sref, scand, name, sd)
        agree = "yes" if slo <= r <= shi else "no"
        print(f"| {name} | {r:.3f} ({lo:.3f}-{hi:.3f}, {n}) | {s:.3f} ({slo:.3f}-{shi:.3f}; sd {sd:.1%}) | {agree} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

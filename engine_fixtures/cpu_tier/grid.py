"""The mechanism benchmark's grid as a table: how the buffer/torch gap grows with threads/quota and concurrency.

    python -m engine_fixtures.cpu_tier.grid [--quotas none,1.0,0.5] [--concurrency 1,4,16]
        [--threads cpus,64,1] [--repeats 3] [--res 1024] [--passive] [--jsonl out.jsonl]

One group per (quota, concurrency): every thread arm's torch and buffer rigs run interleaved in that
group, so ratios are measured in one run. Per thread arm it prints median req/s of both arms and the
buffer/torch ratio as the median and IQR of the per-round ratios (the two windows of one round ran
back to back). ``capped8`` equals ``cpus`` on a box with <= 8 CPUs and is then not run twice.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from engine_fixtures.cpu_tier.arms import CpuTierArm, visible_cpus
from engine_fixtures.cpu_tier.driver import run_arms
from engine_fixtures.judge.sequential import Budget
from engine_fixtures.store.results import RunResult


def ratio_spread(num: Sequence[float], den: Sequence[float]) -> tuple[float, float, float]:
    """(median, q1, q3) of the per-round ratios ``num[i] / den[i]``."""
    r = np.asarray(num, dtype=float) / np.asarray(den, dtype=float)
    q1, med, q3 = np.percentile(r, [25, 50, 75])
    return float(med), float(q1), float(q3)


def thread_arms(requested: Sequence[str]) -> list[str]:
    arms = list(requested)
    if "capped8" in arms and "cpus" in arms and visible_cpus() <= 8:
        arms.remove("capped8")
    return arms


def group(quota: float | None, concurrency: int, threads: Sequence[str], res: int,
          passive: bool) -> list[CpuTierArm]:
    arms = [CpuTierArm(copy=c, threads=t, quota=quota, resolution=res, concurrency=concurrency)
            for t in threads for c in ("torch", "buffer")]
    if passive:
        arms.append(CpuTierArm(copy="torch", threads="cpus", quota=quota, resolution=res, concurrency=concurrency,
                            wait_policy="passive"))
    return arms


def rows(results: Sequence[RunResult]) -> list[list[str]]:
    by = {tuple(sorted(r.arm.items())): r for r in results}
    out = []
    for r in results:
        if r.arm["copy"] != "torch":
            continue
        t = r.samples["requests_per_s"]
        buf_key = tuple(sorted({**r.arm, "copy": "buffer"}.items()))
        label = r.arm["threads"] + (" PASSIVE" if r.arm.get("wait") else "")
        cores = f"{np.median(r.samples['producer_cpu_cores']):.2f}"
        row = [r.arm["quota"], r.arm["c"], label, f"{np.median(t):.2f}"]
        if buf_key in by:
            b = by[buf_key].samples["requests_per_s"]
            med, q1, q3 = ratio_spread(b, t)
            cores += f" / {np.median(by[buf_key].samples['producer_cpu_cores']):.2f}"
            row += [f"{np.median(b):.2f}", f"{med:.2f}x [{q1:.2f}-{q3:.2f}]"]
        else:
            row += ["-", "-"]
        out.append([*row, cores])
    return out


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quotas", default="none,1.0,0.5")
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--threads", default="cpus,64,capped8,1")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--res", type=int, default=1024)
    ap.add_argument("--passive", action="store_true", help="add a torch arm with OMP_WAIT_POLICY=PASSIVE")
    ap.add_argument("--jsonl", type=Path, help="append each RunResult's samples here")
    args = ap.parse_args(argv)
    threads = thread_arms(args.threads.split(","))
    table = Table(title=f"req/s, {args.res} px, {visible_cpus()} CPUs, {args.repeats} interleaved rounds")
    for col in ("quota", "C", "threads", "torch", "buffer", "buffer/torch [IQR]", "producer cores t / b"):
        table.add_column(col)
    console = Console()
    for q in args.quotas.split(","):
        for c in (int(x) for x in args.concurrency.split(",")):
            arms = group(None if q == "none" else float(q), c, threads, args.res, args.passive)
            results = run_arms(arms, Budget.fixed(args.repeats), warmup=1, requests=max(24, 2 * c))
            if args.jsonl:
                with args.jsonl.open("a") as f:
                    for r in results:
                        f.write(json.dumps({"scenario": r.scenario, "arm": dict(r.arm), "metadata": dict(r.metadata),
                                            "samples": {k: list(v) for k, v in r.samples.items()}}) + "\n")
            for row in rows(results):
                table.add_row(*row)
                console.print(" | ".join(row))
    console.print(table)


if __name__ == "__main__":
    main()

"""Does the drift between runs follow the host's CPU? (issue 44, item 4)

    python -m tools.studies.host_drift RUN1/results-*.json RUN2/... [--out DIR]

Runs minutes apart on one H200 differed by 9 % in req/s and 13 % in TTFT while engines alive together agreed within
2-4 % (docs/results/h200-issue36-2026-12-04b). Every window now carries the host's steal time and a fixed CPU
probe's CPU and wall time (``sampling.host``). Per arm, over the results files (each a run), this reads each run's
mean of req/s, TTFT p50 and TPOT (log) beside its mean steal fraction and probe times, and gives:

- the spread of each between runs (sd of the run means: a CV for the log metrics and the probe);
- Pearson's r of each metric's run means against each host reading's run means (``scipy.stats.pearsonr``), with its
  p-value: a drift that follows the host shows as a large r; with few runs only a large one means anything;
- the same within runs: each window's deviation from its run's mean, pooled over runs and arms, against the
  window's host readings (many windows: small correlations show).
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
from scipy import stats

METRICS = ("requests_per_s", "ttft_p50_ms", "tpot_gmean_ms")
HOST = ("host_steal_fraction", "host_probe_cpu_ms", "host_probe_wall_ms")


def _arm(r: Mapping[str, Any]) -> str:
    meta = r.get("metadata", {})
    return f"{meta.get('live_group') or meta.get('group')}/{meta.get('live_arm') or meta.get('group_member')}"


def windows(paths: Sequence[Path]) -> list[dict[str, Any]]:
    """One row per window with every metric and host reading: its run (file index) and arm."""
    out = []
    for i, path in enumerate(paths):
        for r in json.loads(Path(path).read_text())["results"]:
            s = r["samples"]
            n = max((len(s.get(k, ())) for k in (*METRICS, *HOST)), default=0)
            sparse = r.get("metadata", {}).get("sample_windows", {})
            for w in range(n):
                row: dict[str, Any] = {"run": i, "arm": _arm(r)}
                for k in (*METRICS, *HOST):
                    idx = sparse.get(k)
                    vals = s.get(k, ())
                    j = idx.index(w) if idx is not None and w in idx else (w if idx is None else None)
                    if j is not None and j < len(vals) and vals[j] is not None and math.isfinite(vals[j]):
                        row[k] = math.log(vals[j]) if k in METRICS else float(vals[j])
                out.append(row)
    return out


def _r(x: Sequence[float], y: Sequence[float]) -> tuple[float, float, int]:
    if len(x) < 3 or np.std(x) == 0 or np.std(y) == 0:
        return math.nan, math.nan, len(x)
    res = stats.pearsonr(x, y)
    return float(res.statistic), float(res.pvalue), len(x)


def analyse(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    arms = sorted({r["arm"] for r in rows})
    between, within = [], []
    for arm in arms:
        runs = sorted({r["run"] for r in rows if r["arm"] == arm})
        means = {k: [float(np.mean([r[k] for r in rows if r["arm"] == arm and r["run"] == i and k in r]))
                     for i in runs] for k in (*METRICS, *HOST)}
        for m in METRICS:
            for h in HOST:
                pairs = [(a, b) for a, b in zip(means[m], means[h], strict=True)
                         if math.isfinite(a) and math.isfinite(b)]
                r, p, n = _r([a for a, _ in pairs], [b for _, b in pairs])
                between.append({"arm": arm, "metric": m, "host": h, "runs": n, "r": r, "p": p,
                                "metric_sd": float(np.std(means[m], ddof=1)) if len(runs) > 1 else math.nan,
                                "host_mean": float(np.nanmean(means[h])),
                                "host_sd": float(np.nanstd(means[h], ddof=1)) if len(runs) > 1 else math.nan})
    for m in METRICS:
        for h in HOST:
            xs, ys = [], []
            for arm in arms:
                for i in {r["run"] for r in rows if r["arm"] == arm}:
                    cell = [r for r in rows if r["arm"] == arm and r["run"] == i and m in r and h in r]
                    if len(cell) < 2:
                        continue
                    mm, hm = np.mean([r[m] for r in cell]), np.mean([r[h] for r in cell])
                    xs += [r[m] - mm for r in cell]
                    ys += [r[h] - hm for r in cell]
            r, p, n = _r(ys, xs)
            within.append({"metric": m, "host": h, "windows": n, "r": r, "p": p})
    return {"between_runs": between, "within_runs": within}


def render(found: Mapping[str, Any]) -> list[Table]:
    b = Table("arm", "metric", "host reading", "runs", "sd of metric run means", "host: mean / sd of run means",
              "r", "p", title="Between runs: does a run's level follow its host?")
    for r in found["between_runs"]:
        b.add_row(r["arm"], r["metric"], r["host"], str(r["runs"]), f"{r['metric_sd']:.1%}",
                  f"{r['host_mean']:.4g} / {r['host_sd']:.3g}", f"{r['r']:+.2f}", f"{r['p']:.3f}")
    w = Table("metric", "host reading", "windows", "r", "p", title="Within runs: window deviations")
    for r in found["within_runs"]:
        w.add_row(r["metric"], r["host"], str(r["windows"]), f"{r['r']:+.2f}", f"{r['p']:.3g}")
    return [b, w]


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", nargs="+", type=Path)
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    found = analyse(windows(args.results))
    console = Console(width=200)
    for t in render(found):
        console.print(t)
    if args.out:
        (args.out / "host_drift.json").write_text(json.dumps(found, indent=1) + "\n")


if __name__ == "__main__":
    main()

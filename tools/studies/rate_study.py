"""The window estimators, recomputed from a results file's per-request records.

    python -m tools.studies.rate_study RESULTS.json [--json OUT]
    python -m tools.studies.rate_study --blocks RESULTS.json [RESULTS.json ...] [--json OUT]

A GPU-tier result keeps the requests behind each measured window in ``metadata["requests"]`` (one entry per window,
as ``scenarios.segment.window_requests`` writes it), so any window statistic can be recomputed on the same windows.

- Default: req/s both ways per result, counted (completions in the window over its length, ``requests_per_s_counted``)
  and continuous (the time-weighted progress rate, ``loadgen.stream.progress_rate``, the judged ``requests_per_s``):
  the windows, both means and both within-run coefficients of variation.
- ``--blocks``: what a live contrast's interval rests on, the per-block sd of the effect ``mean log(candidate) - mean
  log(reference)`` (GPU utilisation: the difference in points), for every pair of arms of a live group served
  together in at least three blocks (the contrasts are among them), per family and window statistic: req/s
  (continuous), TTFT and TPOT each as p50, mean, geometric mean and 20 % trimmed mean of the window's per-request
  values, and the stored role CPU per request and GPU utilisation. Twice: on the windows as stored, and with the
  warm-up rule of the stream applied after the fact (each visit's first window starts once every request sent before
  it has completed: the wave in flight at the old fixed warm-up's end is left out; the window is shortened, where a
  run under the rule shifts it; read "as stored" for files recorded under the rule). The closing table names, per
  family, the statistic with the smallest root-mean-square sd over the pairs.

Results without stored requests (older files, the CPU tier) are named below the table.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from engine_fixtures.errors import BaselineError
from engine_fixtures.loadgen.stream import finished_in, progress_rate
from engine_fixtures.scenarios.segment import stored_window
from engine_fixtures.store.results import ResultsFile
from tools.studies.block_sd import block_sd_rows, render_blocks
from tools.studies.window_study import cv

REQUESTS_KEY = "requests"  # RunResult.metadata: one window_requests() entry per measured window, in samples' order


@dataclass(frozen=True)
class RateRow:
    """One result's windows, req/s both ways (CV: sample standard deviation over the mean, across windows)."""

    scenario: str
    windows: int
    counted_mean: float
    continuous_mean: float
    counted_cv: float
    continuous_cv: float


def window_rates(window: Mapping[str, Any]) -> tuple[float, float]:
    """One stored window's req/s, (counted, continuous), from its rows."""
    lo, hi, records = stored_window(window)
    return len(finished_in(records, lo, hi)) / (hi - lo), progress_rate(records, lo, hi)


def rate_rows(results: ResultsFile) -> tuple[list[RateRow], list[str]]:
    """A row per result with stored requests, and the scenarios of the results without them."""
    rows, missing = [], []
    for result in results.results:
        windows = result.metadata.get(REQUESTS_KEY)
        if not windows:
            missing.append(result.scenario)
            continue
        try:
            counted, continuous = zip(*(window_rates(w) for w in windows), strict=True)
        except ValueError as exc:
            raise BaselineError(f"{result.scenario}: metadata[{REQUESTS_KEY!r}] is malformed ({exc})") from None
        rows.append(RateRow(result.scenario, len(windows), float(np.mean(counted)), float(np.mean(continuous)),
                            cv(counted), cv(continuous)))
    return rows, missing


def render(rows: Sequence[RateRow], missing: Sequence[str], source: str) -> Table:
    table = Table(title=f"Within-run CV of req/s, counted vs continuous on the same windows ({source})",
                  caption=f"no stored requests: {', '.join(missing)}" if missing else None)
    for col in ("scenario", "windows", "mean counted", "mean continuous", "CV counted", "CV continuous"):
        table.add_column(col)
    for r in rows:
        table.add_row(r.scenario, str(r.windows), f"{r.counted_mean:.2f}", f"{r.continuous_mean:.2f}",
                      f"{r.counted_cv:.1%}", f"{r.continuous_cv:.1%}")
    return table


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", type=Path, nargs="+", help="results JSONs written by GPU-tier runs (--perf-results-dir)")
    ap.add_argument("--blocks", action="store_true", help="the per-block sd of every contrast pair per family and "
                    "window statistic, as stored and with the warm-up rule applied")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows to this file")
    args = ap.parse_args(argv)
    try:
        files = [(path.name, ResultsFile.load(path)) for path in args.results]
    except BaselineError as exc:
        raise SystemExit(str(exc)) from None
    console = Console(width=200)
    if args.blocks:
        try:
            tables, data = block_sd_rows(files)
        except (BaselineError, ValueError) as exc:
            raise SystemExit(str(exc)) from None
        for table in render_blocks(tables):
            console.print(table)
    else:
        if len(files) != 1:
            raise SystemExit("req/s counted vs continuous reads one results file; --blocks reads several")
        name, results = files[0]
        try:
            rows, missing = rate_rows(results)
        except BaselineError as exc:
            raise SystemExit(str(exc)) from None
        if not rows:
            raise SystemExit(f"{args.results[0]}: no result keeps its windows' requests (metadata[{REQUESTS_KEY!r}]); "
                             "it was written before they were recorded, or by the CPU tier: run the GPU tier again")
        console.print(render(rows, missing, name))
        data = {"rows": [asdict(r) for r in rows], "missing": missing}
    if args.json is not None:
        args.json.write_text(json.dumps(data, indent=2) + "\n")


if __name__ == "__main__":
    main()

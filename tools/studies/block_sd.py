"""Per-block sd of every contrast pair of a live group, per family and window statistic, recomputed from the stored
per-request records (``rate_study --blocks``; its docstring says what is computed and why).

A live contrast's interval rests on the spread of its per-block effects, so this is the number an estimator has to
lower: at 8 blocks and five gating families, ``catches`` is about 1.9 times it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

import numpy as np
from rich.table import Table
from scipy import stats

from engine_fixtures.errors import BaselineError
from engine_fixtures.judge.blocks import effects_by_block
from engine_fixtures.judge.decide import MIN_BLOCKS
from engine_fixtures.loadgen.latency import tpot_values
from engine_fixtures.loadgen.stream import finished_in, progress_rate
from engine_fixtures.loadgen.stream_driver import warmup_end
from engine_fixtures.scenarios.blocks_run import VISIT_KEY
from engine_fixtures.scenarios.segment import stored_window
from engine_fixtures.store.results import BLOCK_KEY, ResultsFile, RunResult

REQUESTS_KEY = "requests"
STATISTICS: Mapping[str, Callable[[np.ndarray], float]] = {
    "p50": lambda v: float(np.percentile(v, 50)),
    "mean": lambda v: float(v.mean()),
    "gmean": lambda v: float(np.exp(np.log(v).mean())) if (v > 0).all() else math.nan,
    "trim20": lambda v: float(stats.trim_mean(v, 0.2)),
}
STORED = ("gpu_util_mean", "gpu_util_buffer_mean")  # the poll (linear: points) and NVML's sample buffer (log: %)
STORED_PREFIXES = ("cpu_s_per_request.", "cpu_share_of_quota.")
MODES = ("as stored", "warm-up rule")


@dataclass(frozen=True)
class PairRow:
    source: str
    group: str
    pair: str  # "candidate vs reference"
    blocks: int
    sd_pct: Mapping[str, float]  # family:statistic -> per-block sd, % (GPU: points)


def window_values(window: Mapping[str, Any], warmup_rule: bool) -> dict[str, float]:
    """One stored window recomputed: req/s (continuous) and every statistic of TTFT and TPOT (ms). With
    ``warmup_rule`` the window starts once every request sent before its start has completed, by the stream's own
    rule (``loadgen.stream_driver.warmup_end``)."""
    lo, hi, records = stored_window(window)
    if warmup_rule:
        lo = warmup_end(lo, max((r.end_s for r in records if r.sent_s < lo), default=-math.inf))
        if not lo < hi:
            raise ValueError(f"the warm-up's in-flight requests outlast the window [{window['t0_s']}, {hi}] s")
    done = finished_in(records, lo, hi)
    if not done:
        raise ValueError(f"no completed request in the window [{lo:.3f}, {hi:.3f}] s")
    out = {"requests_per_s": progress_rate(records, lo, hi)}
    for family, values in (("ttft", [r.ttft_s for r in done]), ("tpot", tpot_values(done))):
        ms = np.asarray(values, dtype=float) * 1000
        if ms.size:
            out.update({f"{family}:{name}": f(ms) for name, f in STATISTICS.items()})
    return out


def _arm_windows(result: RunResult, warmup_rule: bool) -> list[tuple[int, dict[str, float]]]:
    """The arm's windows (``RunResult.block_windows``) with TTFT, TPOT and req/s recomputed from the stored requests
    and the stored role CPU and GPU utilisation kept."""
    visits, stored = result.metadata.get(VISIT_KEY), result.metadata.get(REQUESTS_KEY)
    windows = result.block_windows()
    if not (visits and stored) or not len(windows) == len(visits) == len(stored):
        raise BaselineError(f"{result.scenario}: its windows' blocks, visits and requests are not all stored alike")
    return [(block, {**window_values(window, warmup_rule and nth == 0),
                     **{n: v for n, v in values.items() if n in STORED or n.startswith(STORED_PREFIXES)}})
            for (block, values), (_visit, nth), window in zip(windows, visits, stored, strict=True)]


def _sd(reference: Sequence[tuple[int, dict[str, float]]], candidate: Sequence[tuple[int, dict[str, float]]],
        name: str) -> tuple[float, int]:
    """The per-block sd of the effect (``judge.blocks.effects_by_block``), % on the log scale, points for the linear
    poll of GPU utilisation."""
    linear = name == "gpu_util_mean"
    metric = name if linear else "requests_per_s"  # a registered metric of the same scale
    ref = [(b, w[name]) for b, w in reference if name in w and math.isfinite(w[name])]
    cand = [(b, w[name]) for b, w in candidate if name in w and math.isfinite(w[name])]
    effects = effects_by_block(metric, [v for _, v in ref], [b for b, _ in ref], [v for _, v in cand],
                               [b for b, _ in cand])
    if len(effects) < 2:
        return math.nan, len(effects)
    return (1.0 if linear else 100.0) * float(np.std(effects, ddof=1)), len(effects)


def block_sd_rows(files: Sequence[tuple[str, ResultsFile]]) -> tuple[dict[str, list[PairRow]], dict[str, Any]]:
    """Per mode, a row per pair of arms of each live group in ``files`` served together in >= ``MIN_BLOCKS`` blocks;
    and the same as JSON data."""
    tables: dict[str, list[PairRow]] = {m: [] for m in MODES}
    for source, results in files:
        groups: dict[str, dict[str, RunResult]] = {}
        for r in results.results:
            if r.metadata.get(REQUESTS_KEY) and "live_group" in r.metadata:
                groups.setdefault(str(r.metadata["live_group"]), {})[str(r.metadata["live_arm"])] = r
        for group, arms in groups.items():
            blocks = {a: set(r.metadata[BLOCK_KEY]) for a, r in arms.items()}
            # every pair served together in >= MIN_BLOCKS blocks: an arm dropped once its contrasts were decided
            # (or a row of its first blocks) pairs over the blocks it shared
            pairs = [(a, b) for a, b in combinations(sorted(arms), 2) if len(blocks[a] & blocks[b]) >= MIN_BLOCKS]
            for mode in MODES:
                windows = {a: _arm_windows(arms[a], mode == "warm-up rule") for a in sorted(arms)}
                for ref, cand in pairs:
                    names = sorted({n for _, w in windows[ref] for n in w} & {n for _, w in windows[cand] for n in w})
                    sds = {n: _sd(windows[ref], windows[cand], n) for n in names}
                    tables[mode].append(PairRow(source, group, f"{cand} vs {ref}", max(k for _, k in sds.values()),
                                                {n: v for n, (v, _) in sds.items()}))
    if not any(tables.values()):
        raise BaselineError("no live group with stored requests in these files: run the GPU tier again")
    data = {mode: [{"source": r.source, "group": r.group, "pair": r.pair, "blocks": r.blocks, "sd_pct": r.sd_pct}
                   for r in rows] for mode, rows in tables.items()}
    data["best"] = {mode: best(rows) for mode, rows in tables.items()}
    return tables, data


def best(rows: Sequence[PairRow]) -> dict[str, dict[str, float]]:
    """Per family (ttft, tpot), each statistic's root-mean-square sd over the pairs (the smallest: the one to gate)."""
    out: dict[str, dict[str, float]] = {}
    for family in ("ttft", "tpot"):
        for name in STATISTICS:
            v = [r.sd_pct.get(f"{family}:{name}", math.nan) for r in rows]
            v = [x for x in v if math.isfinite(x)]
            if v:
                out.setdefault(family, {})[name] = math.sqrt(float(np.mean(np.square(v))))
    return out


def render_blocks(tables: Mapping[str, Sequence[PairRow]]) -> list[Table]:
    out = []
    for mode, rows in tables.items():
        names = sorted({n for r in rows for n in r.sd_pct})
        table = Table(title=f"Per-block sd of the effect, % (GPU: points): {mode}")
        for col in ("group", "pair", "blocks", *names):
            table.add_column(col.replace("cpu_s_per_request.", "cpu.").replace("requests_per_s", "req/s")
                             .replace("cpu_share_of_quota.", "share.")
                             .replace("gpu_util_buffer_mean", "gpu buf %").replace("gpu_util_mean", "gpu pts"))
        for r in rows:
            table.add_row(r.group, r.pair, str(r.blocks),
                          *(f"{r.sd_pct[n]:.1f}" if math.isfinite(r.sd_pct.get(n, math.nan)) else "-" for n in names))
        out.append(table)
        summary = Table(title=f"Root-mean-square per-block sd over the pairs, % ({mode})")
        summary.add_column("family")
        for name in STATISTICS:
            summary.add_column(name)
        for family, by in best(rows).items():
            summary.add_row(family, *(f"{by[n]:.2f}" if n in by else "-" for n in STATISTICS))
        out.append(summary)
    return out

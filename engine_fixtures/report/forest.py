"""The picture a report leads with: per scenario, each gating metric's change with its interval, drawn against
the threshold it is flagged beyond and the size a pass promises to exclude (a forest plot); for an A/B, the
per-block candidate/reference ratios in measurement order.

Changes are in each metric's bad direction (positive = worse), relative for log-scale metrics; a linear metric
is drawn relative to its baseline level (skipped when that level is 0). Figures only (Agg, no pyplot state).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure

from engine_fixtures.judge.gating import gating
from engine_fixtures.judge.metrics import is_known, metric
from engine_fixtures.judge.rows import Verdict
from engine_fixtures.store.results import BLOCK_KEY, RunResult

COLOURS = {"regression": "tab:red", "inconclusive": "goldenrod", "improvement": "tab:purple", "pass": "tab:green"}
REFERENCE_SUFFIX = "/build=reference"
BLOCK = 2  # an ABBA block holds two windows of each build (for results that do not name each window's block)


def _relative(v: Verdict, x: float | None) -> float | None:
    if x is None or not math.isfinite(x):
        return None
    if v.scale == "log":
        return x
    return x / abs(v.baseline) if v.baseline else None


def forest(scenario: str, verdicts: Sequence[Verdict]) -> Figure | None:
    """The forest plot of ``scenario``'s gating verdicts (None when none has an interval)."""
    rows = [v for v in verdicts if v.gating and v.is_verdict and v.worse is not None]
    rows = [v for v in rows if _relative(v, v.worse) is not None]
    if not rows:
        return None
    fig = Figure(figsize=(7.5, 0.55 * len(rows) + 1.4))
    ax = fig.subplots()
    for y, v in enumerate(rows):
        colour = COLOURS.get(v.status, "grey")
        mid = 100 * _relative(v, v.worse)
        lo, hi = _relative(v, v.worse_lo), _relative(v, v.worse_hi)
        if lo is not None and hi is not None:
            ax.plot([100 * lo, 100 * hi], [y, y], color=colour, lw=2.5, solid_capstyle="butt")
        ax.plot([mid], [y], "o", color=colour, ms=7)
        flags = _relative(v, v.flags)
        if flags is not None:
            ax.plot([100 * flags, -100 * flags], [y, y], "|", color="black", ms=14, mew=1.5)
        promise = _relative(v, v.excludes)
        if promise is not None:
            ax.plot([100 * promise], [y], "D", mfc="none", mec="tab:blue", ms=8, mew=1.5)
        catches = _relative(v, v.detectable)
        beyond = " beyond the bound" if v.excludes != v.detectable else ""  # a contrast whose bound allows a loss
        text = f"{v.status} {v.change_text(v.delta)}" + (f", catches {100 * catches:.0f}%{beyond}" if catches else "")
        ax.annotate(text, (1.01, y), xycoords=("axes fraction", "data"), va="center", fontsize=7, color=colour)
    ax.axvline(0, color="grey", lw=0.8)
    ax.set_yticks(range(len(rows)), [v.metric for v in rows], fontsize=7)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.invert_yaxis()
    ax.set_xlabel("change in the bad direction, % (dot: measured, bar: interval at the gate's alpha; "
                  "|: flagged beyond; ◇: the size a pass excludes)", fontsize=7)
    ax.set_title(scenario, fontsize=8)
    return fig


def ab_ratios(candidate: RunResult, reference: RunResult, names: Sequence[str] = ()) -> Figure | None:
    """Per-block candidate/reference ratios in measurement order for the A/B's gating metrics (each sample's block
    is ``metadata["window_block"]`` at its window, else the windows of block i are ``2i, 2i+1`` of each build);
    instance pairs are shaded apart when the result says how many."""
    names = [n for n in (names or gating(candidate.samples, candidate.arm)) if n in reference.samples
             and is_known(n) and metric(n).scale.name == "log"]
    series = {}
    for n in names:
        b, a = _block_logs(candidate, n), _block_logs(reference, n)
        both = sorted(set(a) & set(b))
        if len(both) >= 2:
            series[n] = [math.exp(np.mean(b[k]) - np.mean(a[k])) for k in both]
    if not series:
        return None
    fig = Figure(figsize=(7.5, 3.2))
    ax = fig.subplots()
    pairs = int(candidate.metadata.get("instance_pairs", 1) or 1)
    count = max(len(s) for s in series.values())
    if pairs > 1 and count % pairs == 0:
        per = count // pairs
        for p in range(1, pairs, 2):
            ax.axvspan(p * per + 0.5, (p + 1) * per + 0.5, color="0.92", lw=0)
    for n, s in sorted(series.items()):
        ax.plot(range(1, len(s) + 1), s, marker="o", ms=4, label=n)
        detect = metric(n).ab_detect or 0.10
        worse = 1 + detect if metric(n).direction == "lower" else 1 - detect
        ax.axhline(worse, ls=":", lw=0.8, color=ax.lines[-1].get_color())
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xlabel("block, in measurement order" + (f" (shaded: alternate engine pairs of {pairs})" if pairs > 1
                                                    else ""), fontsize=7)
    ax.set_ylabel("candidate / reference", fontsize=7)
    ax.set_title(f"A/B per block: {candidate.scenario} (dotted: the declared A/B size, bad direction)", fontsize=8)
    ax.legend(fontsize=6)
    return fig


def _block_logs(r: RunResult, name: str) -> dict[int, list[float]]:
    """The logs of ``samples[name]`` by block (see ``ab_ratios``): a per-segment metric has one value per segment."""
    blocks = r.aligned(BLOCK_KEY, name)
    if blocks is None:
        blocks = [i // BLOCK for i in range(len(r.samples[name]))]
    out: dict[int, list[float]] = {}
    for k, v in zip(blocks, np.log(r.samples[name]), strict=True):
        out.setdefault(int(k), []).append(float(v))
    return out


def ab_pairs(results: Sequence[RunResult]) -> list[tuple[RunResult, RunResult]]:
    """(candidate, reference) results of this run's A/Bs."""
    by = {r.scenario: r for r in results}
    return [(by[s[:-len(REFERENCE_SUFFIX)]], r) for s, r in by.items()
            if s.endswith(REFERENCE_SUFFIX) and s[:-len(REFERENCE_SUFFIX)] in by]

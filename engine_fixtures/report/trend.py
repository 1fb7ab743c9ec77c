"""Trends over the run history: each run's level of a metric, its change points, one picture per scenario.

``trend(points)`` turns a series of ``SeriesPoint`` (one per run, oldest first) into per-run levels on the
metric's judged scale (the mean of the log windows for ratio-like metrics, as the judge sees them) and the
change points ``judge.changepoint`` finds in them. ``figure(trends, title)`` draws one panel per metric:

- x: the runs in order (evenly spaced; ticks say the date), so a burst of runs on one day stays readable;
- a dot per run at the median of its windows, a bar from its fastest to its slowest window; the dot's
  colour is the run's verdict on that metric (the HTML report's colours), a hollow dot a run measured with an
  injected fault or against an A/B reference (never a baseline);
- a flat line per regime between change points at its level, and at each change point a dashed line labelled
  with the change (-18%) and its p-value; the panel title says whether higher or lower is better.

``write_png(fig, path)`` saves it (Agg, no pyplot state); ``run_trends(store, results)`` gives the HTML report
one such picture per scenario of a run, over that machine key's newest runs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import pairwise
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from engine_fixtures.judge import changepoint
from engine_fixtures.judge.changepoint import ChangePoint
from engine_fixtures.judge.metrics import metric
from engine_fixtures.store.clean import is_clean
from engine_fixtures.store.history import HistoryStore, SeriesPoint
from engine_fixtures.store.history import parse_date as _parse_date
from engine_fixtures.store.results import ResultsFile

HEADLINE = ("requests_per_s", "copy_per_s", "ttft_p50_ms", "tpot_p50_ms", "latency_p50_ms", "output_tokens_per_s",
            "ipc_opens_per_image", "rebuild_ms_per_image")
COLOURS = {"regression": "tab:red", "inconclusive": "goldenrod", "improvement": "tab:purple", "pass": "tab:green",
           "no-baseline": "tab:gray", "report-only": "steelblue", "unjudged": "steelblue"}


@dataclass(frozen=True)
class Trend:
    """``levels[i]`` is run i's level on the judged scale (None for an injected or A/B run: drawn, but not part of
    the build's series); change points index ``points``."""

    metric: str
    points: tuple[SeriesPoint, ...]
    levels: tuple[float | None, ...]
    changes: tuple[ChangePoint, ...]  # significant and at least the metric's floor
    minor: tuple[ChangePoint, ...] = ()  # significant but smaller than the floor: noted, not drawn or counted

    def value(self, level: float) -> float:
        """A judged-scale level back in the metric's unit."""
        return math.exp(level) if metric(self.metric).scale.name == "log" else level

    def relative(self, cp: ChangePoint) -> float:
        before, after = self.value(cp.before_mean), self.value(cp.after_mean)
        return (after - before) / abs(before) if before else float("inf")

    def regimes(self) -> list[tuple[int, int, float]]:
        """(first run, end, level in the metric's unit) between change points, from the build's own runs."""
        bounds = [0, *(cp.index for cp in self.changes), len(self.points)]
        out = []
        for a, b in pairwise(bounds):
            own = [x for x in self.levels[a:b] if x is not None]
            if own:
                out.append((a, b, self.value(float(np.mean(own)))))
        return out


def _of_build(p: SeriesPoint) -> bool:
    """The point measured the build as it is (``store.clean``'s rule, whatever the run was judged: a trend draws
    every run of the build, bad ones too, to find where it changed)."""
    return is_clean(p, p.outcome, judged_bad=True)


def trend(points: Sequence[SeriesPoint], alpha: float = 0.01, permutations: int = 999) -> Trend:
    """Levels and change points of one series. Injected and A/B runs do not describe the build: they are left
    out of the levels. A change smaller than the metric's declared floor (the smallest change the judge ever
    flags) is significant only because the runs are quiet: it is kept apart."""
    m = metric(points[0].metric)
    levels = tuple(float(np.mean(m.scale.forward(p.values))) if _of_build(p) else None for p in points)
    basis = [i for i, x in enumerate(levels) if x is not None]
    own = [levels[i] for i in basis]
    found = changepoint.detect(own, alpha=alpha, permutations=permutations) if len(own) >= 4 else []
    found = [replace(cp, index=basis[cp.index]) for cp in found]
    big = tuple(cp for cp in found if abs(cp.after_mean - cp.before_mean) >= m.scale_floor)
    return Trend(m.name, tuple(points), levels, big, tuple(cp for cp in found if cp not in big))


def summary(t: Trend) -> str:
    """One line: the change points, or that the runs are one regime."""
    if len(t.points) < 4:
        return f"{len(t.points)} run(s): too few to look for a change"
    if not t.changes:
        return f"no change point in {len(t.points)} runs" + (f" ({len(t.minor)} below the floor)" if t.minor else "")
    return "; ".join(f"{t.relative(cp):+.1%} from run {cp.index + 1}" for cp in t.changes)


def headline(names: Sequence[str], limit: int = 3) -> list[str]:
    """The metrics worth a trend panel: the headline ones present, else the first judged ones."""
    present = [n for n in HEADLINE if n in names]
    if not present:
        present = [n for n in sorted(names) if metric(n).judged]
    return present[:limit]


def _ticks(points: Sequence[SeriesPoint]) -> list[str]:
    out, last_day = [], ""
    for p in points:
        when = _parse_date(p.date)
        day = when.strftime("%Y-%m-%d")
        out.append(when.strftime("%H:%M") if day == last_day else when.strftime("%m-%d\n%H:%M"))
        last_day = day
    return out


def _panel(ax, t: Trend) -> None:
    m = metric(t.metric)
    xs = np.arange(len(t.points))
    med = [float(np.median(p.values)) for p in t.points]
    lo = [med[i] - min(p.values) for i, p in enumerate(t.points)]
    hi = [max(p.values) - med[i] for i, p in enumerate(t.points)]
    ax.errorbar(xs, med, yerr=[lo, hi], fmt="none", ecolor="0.6", elinewidth=1, capsize=2, zorder=1)
    for x, y, p in zip(xs, med, t.points, strict=True):
        colour = COLOURS.get(p.status, "steelblue")
        hollow = not _of_build(p)
        ax.scatter([x], [y], s=36, zorder=3, edgecolors=colour, linewidths=1.5,
                   facecolors="white" if hollow else colour)
    for a, b, level in t.regimes():
        ax.hlines(level, a - 0.4, b - 0.6, colors="black", linewidth=1.5, zorder=2)
        ax.annotate(f"{level:.4g}", xy=(b - 0.6, level), xytext=(2, 2), textcoords="offset points", fontsize=7)
    for cp in t.changes:
        ax.axvline(cp.index - 0.5, color="tab:red", linestyle="--", linewidth=1)
        ax.annotate(f"{t.relative(cp):+.1%}\np={cp.p_value:.3f}", xy=(cp.index - 0.5, 1.0),
                    xycoords=("data", "axes fraction"), xytext=(3, -3), textcoords="offset points",
                    va="top", fontsize=8, color="tab:red")
    better = {"higher": "higher is better", "lower": "lower is better"}.get(m.direction, "")
    ax.set_title(f"{t.metric} ({m.unit}; {better})" if better else f"{t.metric} ({m.unit})", fontsize=9, loc="left")
    ax.set_title(summary(t), fontsize=8, loc="right", color="tab:red" if t.changes else "0.3")
    ax.set_xlim(-0.6, len(t.points) - 0.4)
    ax.grid(axis="y", color="0.9")
    ax.tick_params(labelsize=7)


def figure(trends: Sequence[Trend], title: str, subtitle: str = "") -> Figure:
    """One panel per trend, sharing the run axis when they share the runs."""
    fig = Figure(figsize=(8, 1.2 + 2.3 * len(trends)), layout="constrained")
    axes = fig.subplots(len(trends), 1, squeeze=False)[:, 0]
    for ax, t in zip(axes, trends, strict=True):
        _panel(ax, t)
        ax.set_xticks(np.arange(len(t.points)), _ticks(t.points))
    fig.suptitle(title + (f"\n{subtitle}" if subtitle else ""), fontsize=9)
    seen = {p.status for t in trends for p in t.points}
    labels = {"pass": "pass", "regression": "regression", "inconclusive": "inconclusive", "improvement": "improvement",
              "no-baseline": "no baseline yet", "report-only": "report only", "unjudged": "none recorded"}
    handles = [axes[0].scatter([], [], color=COLOURS[k], s=30, label=f"verdict: {label}")
               for k, label in labels.items() if k in seen]
    if not all(_of_build(p) for t in trends for p in t.points):
        handles.append(axes[0].scatter([], [], facecolors="white", edgecolors="0.3", s=30, label="injected / A-B run"))
    handles.append(axes[0].errorbar([], [], yerr=[], fmt="none", ecolor="0.6", label="its windows, min to max"))
    handles.append(axes[0].hlines([], 0, 0, colors="black", label="level between change points"))
    fig.legend(handles=handles, loc="outside lower center", ncols=4, fontsize=7, frameon=False)
    return fig


def write_png(fig: Figure, path: Path, dpi: int = 110) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=dpi)
    return path


def run_trends(store: HistoryStore, rf: ResultsFile, last: int = 30) -> list[tuple[str, Figure]]:
    """For the HTML report: per scenario of this run, its headline metrics over the newest ``last`` runs of this
    machine key in the store (scenarios with a single run have no trend yet)."""
    scenarios = sorted({r.scenario for r in rf.results})
    present = sorted({n for r in rf.results for n in r.samples})
    wanted = headline(present, limit=len(HEADLINE))
    series = store.series(metric=wanted, machine_key=rf.machine_key, scenarios=scenarios, last=last)
    out = []
    for (key, scenario), names in sorted(by_scenario(series).items()):
        chosen = [n for n in headline(names) if len(series[(key, scenario, n)]) >= 2]
        if chosen:
            ts = [trend(series[(key, scenario, n)]) for n in chosen]
            out.append((scenario, figure(ts, scenario, f"the newest {len(ts[0].points)} runs of {key}")))
    return out


def by_scenario(series: Mapping[tuple[str, str, str], Sequence[SeriesPoint]]) -> dict[tuple[str, str], list[str]]:
    """(machine key, scenario) -> its metric names in the series."""
    out: dict[tuple[str, str], list[str]] = {}
    for key, scenario, name in series:
        out.setdefault((key, scenario), []).append(name)
    return out

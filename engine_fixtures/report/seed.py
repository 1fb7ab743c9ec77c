"""The seed's figures drawn beside ours (``judge.levels.FigureResult``): matplotlib ``Figure`` objects, no pyplot.

``lines``: the metric against x (concurrency, image size), one colour per series, each measured point with its 95 %
interval, the seed's published point as a hollow marker on a dashed line of the same colour. ``bars``: a bar per
point with its interval, the seed's value as a hollow marker. The title carries what the shapes say: green when every
shape reproduces the seed's, red when one does not, amber while one is undecided, black for a figure without shapes;
each shape is listed under the plot with its ratio, interval and status.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from matplotlib.figure import Figure
from PIL import Image

from engine_fixtures.judge.levels import FigureResult

STATUS_COLOUR = {"reproduced": "tab:green", "not reproduced": "tab:red", "undecided": "tab:orange",
                 "measured": "black"}


def overall(fig: FigureResult) -> str:
    """What the figure's shapes say together: ``measured`` for a figure that declares none."""
    statuses = {s.status for s in fig.shapes}
    if not statuses:
        return "measured"
    if "not reproduced" in statuses:
        return "not reproduced"
    if "undecided" in statuses:
        return "undecided"
    return "reproduced"


def draw(fig: FigureResult) -> Figure:
    out = Figure(figsize=(7.0, 3.6 + 0.22 * len(fig.shapes)))
    ax = out.subplots()
    series = list(dict.fromkeys(lv.series for lv in fig.levels))
    colours = {s: f"C{i}" for i, s in enumerate(series)}
    if fig.draw == "lines":
        for s in series:
            pts = sorted((lv for lv in fig.levels if lv.series == s), key=lambda lv: lv.x)
            xs = [lv.x for lv in pts]
            ys = [lv.value for lv in pts]
            err = [[_half(lv, 0) for lv in pts], [_half(lv, 1) for lv in pts]]
            ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, color=colours[s], label=f"{s} (measured)")
            seeds = [(lv.x, lv.seed) for lv in pts if lv.seed is not None]
            if seeds:
                ax.plot(*zip(*seeds, strict=True), ls="--", marker="s", mfc="none", color=colours[s], alpha=0.7,
                        label=f"{s} (seed)")
        ax.set_xscale("log", base=2)
        xs_all = sorted({lv.x for lv in fig.levels})
        ax.set_xticks(xs_all, [f"{x:g}" for x in xs_all])
    else:
        seeded = [i for i, lv in enumerate(fig.levels) if lv.seed is not None]
        for i, lv in enumerate(fig.levels):
            ax.bar(i, lv.value, yerr=[[_half(lv, 0)], [_half(lv, 1)]], capsize=4, color=colours[lv.series], alpha=0.8)
            if lv.seed is not None:
                ax.plot([i], [lv.seed], marker="s", mfc="none", mec="black", ms=9, ls="none",
                        label="seed" if i == seeded[0] else None)
        one_x = len({lv.x for lv in fig.levels}) == 1
        ax.set_xticks(range(len(fig.levels)), [lv.series if one_x else f"{lv.series}\n{lv.x:g}" for lv in fig.levels],
                      fontsize=7)
    ax.set_xlabel(fig.x_label)
    ax.set_ylabel(f"{fig.metric} ({fig.unit})" if fig.unit else fig.metric)
    if ax.get_legend_handles_labels()[0]:  # a figure the seed gave no number for has nothing to label
        ax.legend(fontsize=7)
    verdict = overall(fig)
    ax.set_title(f"{fig.title}: {verdict}", fontsize=9, color=STATUS_COLOUR[verdict])
    lines = [f"{s.label}: {s.ratio:.3g}x" + (f" [{s.lo:.3g}, {s.hi:.3g}]" if math.isfinite(s.lo) else "")
             + f", seed {s.side} {s.factor:g}x: {s.status}" for s in fig.shapes]
    if fig.source:
        lines.append(f"seed: {fig.source}")
    for i, text in enumerate(lines):
        colour = STATUS_COLOUR.get(fig.shapes[i].status, "black") if i < len(fig.shapes) else "grey"
        out.text(0.01, 0.01 + 0.045 * (len(lines) - 1 - i), text, fontsize=7, color=colour)
    out.subplots_adjust(bottom=0.16 + 0.05 * len(lines))
    return out


def _half(lv, side: int) -> float:  # type: ignore[no-untyped-def]
    lo, hi = lv.interval
    if not math.isfinite(lo):
        return 0.0
    return lv.value - lo if side == 0 else hi - lv.value


def write_pngs(figures: Sequence[FigureResult], out: Path, dpi: int = 90) -> list[Path]:
    """Each figure as ``seed-<id>.png`` in ``out`` and all of them on one sheet, ``seed-figures.png`` (two columns):
    the pictures a reader opens without the HTML."""
    if not figures:
        return []
    paths = []
    for f in figures:
        path = out / f"seed-{f.id}.png"
        draw(f).savefig(path, format="png", dpi=dpi, bbox_inches="tight")
        paths.append(path)
    sizes = []
    for p in paths:
        with Image.open(p) as img:
            sizes.append(img.size)
    w, h = max(s[0] for s in sizes), max(s[1] for s in sizes)
    cols = 2 if len(paths) > 1 else 1
    sheet = Image.new("RGB", (cols * w, -(-len(paths) // cols) * h), "white")
    for k, p in enumerate(paths):
        with Image.open(p) as img:
            sheet.paste(img.convert("RGB"), ((k % cols) * w, (k // cols) * h))
    sheet.save(out / "seed-figures.png")
    return [*paths, out / "seed-figures.png"]

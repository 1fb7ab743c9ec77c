"""HTML report with matplotlib plots (``Figure`` objects, Agg canvas, no pyplot state).

Plots only for metrics that are present. The report leads with the seed's figures where a run measured them
(``report.seed``: each beside the seed's numbers, coloured by whether its shape reproduces), then what each
scenario's verdicts promise (``report.forest``: a forest plot per scenario, per-block ratios per A/B), then the table.

Plots: throughput vs concurrency per arm (``requests_per_s``/``output_tokens_per_s``/``copy_per_s``
against the arm axis ``c`` or ``concurrency``), a bar chart per gated metric comparing arms (median
with min-max spread), TTFT distributions, CPU share / GPU utilisation per arm, and (from the run history) a
trend per scenario: its headline metrics over the machine key's newest runs and their change points.
"""

from __future__ import annotations

import base64
import html
import io
import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib
from matplotlib.figure import Figure

from engine_fixtures.judge.levels import FigureResult
from engine_fixtures.judge.summary import summarize
from engine_fixtures.report.forest import ab_pairs, ab_ratios, forest
from engine_fixtures.report.seed import draw, overall, write_pngs
from engine_fixtures.report.table import COLUMNS, Row, ordered
from engine_fixtures.store.files import atomic_write_text
from engine_fixtures.store.results import ResultsFile, RunResult

# Matplotlib 3.10 added `orientation`; 3.11 deprecates `vert` (a warning, so an error under filterwarnings=error).
_MPL = tuple(int(x) for x in matplotlib.__version__.split(".")[:2])
_HORIZONTAL = {"orientation": "horizontal"} if _MPL >= (3, 10) else {"vert": False}

THROUGHPUT = ("requests_per_s", "output_tokens_per_s", "copy_per_s")
CONCURRENCY_AXES = ("c", "concurrency")
SHARE = ("producer_share_of_quota", "producer_cpu_cores", "gpu_util_mean", "gpu_util_buffer_mean", "throttled_ratio")


def _png(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, bbox_inches="tight")
    return f'<img src="data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}">'


def _label(r: RunResult, skip: Sequence[str] = ()) -> str:
    return ",".join(f"{k}={v}" for k, v in r.arm.items() if k not in skip) or r.scenario


def _throughput_vs_concurrency(results: Sequence[RunResult], name: str) -> str | None:
    series: dict[str, list[tuple[float, float]]] = {}
    for r in results:
        axis = next((a for a in CONCURRENCY_AXES if a in r.arm), None)
        if axis is None or name not in r.samples:
            continue
        try:
            x = float(r.arm[axis])
        except ValueError:
            continue
        series.setdefault(_label(r, CONCURRENCY_AXES), []).append((x, summarize(r.samples[name]).median))
    series = {k: v for k, v in series.items() if len({x for x, _ in v}) >= 2}
    if not series:  # one concurrency point per arm is a bar chart's job, not a line's
        return None
    fig = Figure(figsize=(6, 3.5))
    ax = fig.subplots()
    for label, pts in sorted(series.items()):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    ax.set_xlabel("concurrency")
    ax.set_ylabel(name)
    ax.legend(fontsize=6)
    return _png(fig)


VERDICT_COLOURS = {"regression": "tab:red", "inconclusive": "gold", "improvement": "tab:purple",
                   "pass": "tab:green", "no-baseline": "tab:gray", "report-only": "lightsteelblue"}


def _bars(results: Sequence[RunResult], name: str, statuses: dict[tuple[str, str], str] | None = None) -> str | None:
    have = [r for r in results if name in r.samples]
    if len(have) < 1:
        return None
    fig = Figure(figsize=(6, 0.4 * len(have) + 1.2))
    ax = fig.subplots()
    meds = [summarize(r.samples[name]) for r in have]
    colours = [VERDICT_COLOURS.get((statuses or {}).get((r.scenario, name), "report-only"), "lightsteelblue")
               for r in have]
    ax.barh(range(len(have)), [s.median for s in meds], color=colours,
            xerr=[[s.median - s.min for s in meds], [s.max - s.median for s in meds]], capsize=3)
    ax.set_yticks(range(len(have)), [r.scenario for r in have], fontsize=6)
    ax.set_xlabel(f"{name} (median, min-max; colour = verdict: red regression, yellow inconclusive, green pass, "
                  "grey no baseline)", fontsize=7)
    return _png(fig)


def _distribution(results: Sequence[RunResult], name: str) -> str | None:
    have = [r for r in results if name in r.samples]
    if not have:
        return None
    fig = Figure(figsize=(6, 0.4 * len(have) + 1.2))
    ax = fig.subplots()
    ax.boxplot([list(r.samples[name]) for r in have], **_HORIZONTAL)
    ax.set_yticks(range(1, len(have) + 1), [r.scenario for r in have], fontsize=6)
    ax.set_xlabel(name)
    return _png(fig)


def _promises(results: Sequence[RunResult], rows: Sequence[Row]) -> list[str]:
    """What leads the report: each scenario's forest plot, then each A/B's per-block ratios."""
    out = []
    by: dict[str, list[Row]] = {}
    for r in rows:
        by.setdefault(r.scenario, []).append(r)
    for scenario, its in sorted(by.items()):
        fig = forest(scenario, [r.verdict for r in its])
        if fig is not None:
            out.append(f"<h2>what {html.escape(scenario)} promises</h2>{_png(fig)}")
    for cand, ref in ab_pairs(results):
        fig = ab_ratios(cand, ref)
        if fig is not None:
            out.append(f"<h2>A/B per block: {html.escape(cand.scenario)}</h2>{_png(fig)}")
    return out


def _seed_figures(figures: Sequence[FigureResult]) -> list[str]:
    """Each seed figure drawn beside the seed's numbers (``report.seed``), then its points as a table."""
    out = []
    for f in figures:
        cells = []
        for lv in f.levels:
            lo, hi = lv.interval
            ci = f"{lo:.4g} to {hi:.4g}" if math.isfinite(lo) else "-"
            seed = "-" if lv.seed is None else f"{lv.seed:.4g}"
            cells.append(f"<tr><td>{html.escape(lv.series)}</td><td>{lv.x:g}</td><td>{lv.value:.4g}</td>"
                         f"<td>{ci}</td><td>{lv.blocks}</td><td>{seed}</td></tr>")
        out.append(f"<h2>the seed's figure {html.escape(f.id)}: {html.escape(f.title)} ({overall(f)})</h2>"
                   f"{_png(draw(f))}<table border=1><tr><th>series</th><th>{html.escape(f.x_label)}</th>"
                   f"<th>{html.escape(f.metric)}</th><th>95% CI</th><th>blocks</th><th>seed</th></tr>"
                   + "".join(cells) + "</table>")
    return out


def render_html(results: ResultsFile, rows: Sequence[Row], trends: Sequence[tuple[str, Figure]] = (),
                figures: Sequence[FigureResult] = ()) -> str:
    res = results.results
    parts = [f"<h1>Performance report</h1><p>machine <code>{html.escape(results.machine_key)}</code>, "
             f"commit <code>{html.escape(results.suite_commit)}</code>, {html.escape(results.date)}</p>"]
    parts += _seed_figures(figures)
    parts += _promises(res, rows)
    parts.append("<table border=1><tr>" + "".join(f"<th>{c}</th>" for c in COLUMNS) + "</tr>")
    for r in ordered(rows):
        parts.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r.cells()) + "</tr>")
    parts.append("</table>")
    present = sorted({m for r in res for m in r.samples})
    statuses = {(r.scenario, r.verdict.metric): r.verdict.status for r in rows}
    plots: list[tuple[str, str | None]] = []
    plots += [(f"{m} vs concurrency", _throughput_vs_concurrency(res, m)) for m in THROUGHPUT if m in present]
    plots += [(f"{m} per arm", _bars(res, m, statuses)) for m in present
              if m in THROUGHPUT or m.endswith("_ms") or m.startswith(("rel.", "cpu_s_per_request."))]
    ttft = [m for m in ("ttft_p50_ms", "ttft_p99_ms") if m in present]
    plots += [(f"{m} distribution", _distribution(res, m)) for m in ttft]
    plots += [(f"{m} per arm", _bars(res, m, statuses)) for m in present
              if m in SHARE or m.startswith(("cpu_cores.", "cpu_share_of_quota."))]
    for title, img in plots:
        if img is not None:
            parts.append(f"<h2>{html.escape(title)}</h2>{img}")
    for title, fig in trends:  # differential profiles ("differential profile: ...") and run-history trends
        heading = title if title.startswith("differential profile") else f"trend of {title} over the run history"
        parts.append(f"<h2>{html.escape(heading)}</h2>{_png(fig)}")
    return "<!doctype html><html><head><meta charset='utf-8'><title>perf report</title></head><body>" + \
        "\n".join(parts) + "</body></html>\n"


def write_html(path: Path, results: ResultsFile, rows: Sequence[Row],
               trends: Sequence[tuple[str, Figure]] = (), figures: Sequence[FigureResult] = ()) -> Path:
    atomic_write_text(path, render_html(results, rows, trends, figures))
    write_pngs(figures, path.parent)  # the seed's figures as pictures beside the report
    return path

"""Report rows and their text renderings: terminal table (rich) and Markdown (GitHub step summary).

Rows are ordered by verdict severity (``verdicts.STATUSES``: regressions first), then scenario, metric.
Columns: the value measured now, the baseline's (or reference's) level, the change, ``catches``: the change in
the bad direction this gate promises to catch with >= 90 % probability from the noise it measured (for a
contrast with a bound, beyond the bound), the runs pooled (or windows/blocks), and the verdict.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from engine_fixtures.judge.metrics import is_known, metric
from engine_fixtures.judge.verdicts import STATUSES, Verdict

KNOWN = "regression (known: xfail)"  # a known upstream regression's row, flagged as its strict xfail expects
COLUMNS = ("scenario", "arm", "metric", "value", "baseline", "delta", "catches", "n", "verdict")
NUMERIC = ("value", "baseline", "delta", "catches", "n")
_STYLE = {"regression": "bold red", KNOWN: "yellow", "inconclusive": "bold yellow", "improvement": "magenta",
          "no-baseline": "cyan", "pass": "green"}


@dataclass(frozen=True)
class Row:
    scenario: str
    arm: str
    verdict: Verdict
    known: bool = False  # judged by a test that expects this regression (``known_regression``): a green run's row

    @property
    def shown(self) -> str:
        """The verdict as the tables write it: a known regression's flagged row says so."""
        return KNOWN if self.known and self.verdict.status == "regression" else self.verdict.status

    def cells(self) -> tuple[str, ...]:
        v = self.verdict
        unit = metric(v.metric).unit if is_known(v.metric) else ""
        value = "-" if v.current is None else f"{v.current:.4g} {unit}".strip()
        base = "-" if v.baseline is None else f"{v.baseline:.4g}"
        delta = v.change_text(v.delta)
        catches = "-" if v.detectable is None else (
            f"{v.detectable:.1%}" if v.scale == "log" else f"{v.detectable:.3g}")
        unit = {"paired": "blocks", "group": "groups", "level": "blocks"}.get(v.kind, "win")
        n = f"{v.runs} runs" if v.runs else (f"{v.windows} {unit}" if v.windows else "-")
        return (self.scenario, self.arm, v.metric, value, base, delta, catches, n, self.shown)


def arm_text(arm: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in arm.items())


def rows_for(scenario: str, arm: Mapping[str, str], verdicts: Iterable[Verdict], known: bool = False) -> list[Row]:
    return [Row(scenario, arm_text(arm), v, known) for v in verdicts]


def ordered(rows: Iterable[Row]) -> list[Row]:
    return sorted(rows, key=lambda r: (STATUSES.index(r.verdict.status), r.scenario, r.verdict.metric))


def counts(rows: Sequence[Row]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in rows:
        out[r.shown] = out.get(r.shown, 0) + 1
    return out


def terminal_table(rows: Sequence[Row], width: int = 120, color: bool = False) -> str:
    """The summary table as text for the pytest terminal writer.

    The arm column is left out (every scenario id already spells its arm) and cells never wrap: a
    verdict table squeezed into 80 columns is unreadable, so the table is as wide as it needs to be."""
    cols = tuple(c for c in COLUMNS if c != "arm")
    table = Table(title="performance verdicts", show_lines=False)
    for name in cols:
        table.add_column(name, no_wrap=True, justify="right" if name in NUMERIC else "left")
    for r in ordered(rows):
        cells = dict(zip(COLUMNS, r.cells(), strict=True))
        table.add_row(*(cells[c] for c in cols), style=_STYLE.get(r.shown, _STYLE.get(r.verdict.status)))
    buf = io.StringIO()
    console = Console(file=buf, width=10_000, force_terminal=color, color_system="standard" if color else None,
                      highlight=False)
    needed = console.measure(table).maximum
    console.width = max(width, needed)
    console.print(table)
    return buf.getvalue()


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def markdown(rows: Sequence[Row], notes: Sequence[str] = ()) -> str:
    """A GitHub-flavoured Markdown summary: counts line, then the table (regressions first)."""
    c = counts(rows)
    lines = ["## Performance verdicts", ""]
    lines.append(", ".join(f"{c[s]} {s}" for s in (STATUSES[0], KNOWN, *STATUSES[1:]) if s in c)
                 or "no measured results")
    lines.append("")
    if rows:
        lines.append("| " + " | ".join(COLUMNS) + " |")
        lines.append("|" + "---|" * len(COLUMNS))
        for r in ordered(rows):
            lines.append("| " + " | ".join(_md_escape(x) for x in r.cells()) + " |")
        lines.append("")
    lines.extend(f"- {n}" for n in notes)
    return "\n".join(lines).rstrip("\n") + "\n"

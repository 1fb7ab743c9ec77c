"""The seed's published figures, declared against live arms and measured as rows with intervals (``SeedFigure``).

A figure is a set of points ``(series, x)``, each the level of one live arm's metric (or, for a gap, one arm's level
minus another's), set beside the seed's own number, and shape statements (``Shape``: "cuda_ipc scales from C=4 to
C=16"), each the ratio of two points against a factor. A point's level is the mean of its per-block means and its
interval is t over those blocks (the block is the unit: windows of one visit are not independent). Where the two
sides of a gap or a shape ran on separate engines, the offset between two engine instances (TPOT 3 %, TTFT 5 % on
the 4B shape) is not inside the interval (one instance each) and the row says so. A shape is ``reproduced`` when the
whole interval of its ratio lies on the seed's side of the factor, ``not reproduced`` when it lies wholly on the
other side, ``undecided`` otherwise.

These are measured rows (``report-only``), never verdicts: the seed's invariants are ``Contrast``s of the live groups
and are judged as such. ``measure_figure(figure, windows_of)`` computes the rows from each arm's windows; the report
draws them (``report.seed``); the statistics are ``judge.levels``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from engine_fixtures.errors import ConfigError
from engine_fixtures.judge.levels import (
    SIDES,
    FigureResult,
    Window,
    block_means,
    gap,
    level,
    ratio_row,
    requests_per_window,
)
from engine_fixtures.judge.metrics import is_known, metric
from engine_fixtures.scenarios.group import Group

WindowsOf = Callable[[Group, str], Sequence[Window]]


@dataclass(frozen=True)
class Point:
    series: str
    x: float
    group: Group
    arm: str
    seed: float | None = None  # the seed's published value of this point (None: the seed has none)
    minus: tuple[Group, str] | None = None  # a gap: this arm's level minus that arm's

    def __post_init__(self) -> None:
        self.group.arm(self.arm)  # a ConfigError naming the group's arms
        if self.minus is not None:
            self.minus[0].arm(self.minus[1])

    @property
    def engines(self) -> int:
        return 1 if self.minus is None or self.minus[0].engine == self.group.engine else 2


@dataclass(frozen=True)
class Shape:
    """``num / den`` (two points, ``(series, x)``) on the seed's side of ``factor``: ``>=`` or ``<=``."""

    label: str
    num: tuple[str, float]
    den: tuple[str, float]
    factor: float
    side: str = ">="

    def __post_init__(self) -> None:
        if self.side not in SIDES or not self.factor > 0:
            raise ConfigError(f"shape {self.label!r}: side one of {SIDES}, factor > 0")


@dataclass(frozen=True)
class SeedFigure:
    id: str
    title: str
    metric: str
    points: tuple[Point, ...]
    shapes: tuple[Shape, ...] = ()
    draw: str = "lines"  # "lines": the metric against x, a line per series; "bars": a bar per point
    x_label: str = "concurrency"
    source: str = ""  # where the seed's numbers come from (model, GPU, load)

    def __post_init__(self) -> None:
        keys = [(p.series, p.x) for p in self.points]
        if len(set(keys)) != len(keys):
            raise ConfigError(f"seed figure {self.id}: two points at one (series, x)")
        for s in self.shapes:
            for end in (s.num, s.den):
                if end not in keys:
                    raise ConfigError(f"seed figure {self.id}: shape {s.label!r} names point {end}, not declared")
        if self.draw not in ("lines", "bars"):
            raise ConfigError(f"seed figure {self.id}: draw 'lines' or 'bars', not {self.draw!r}")

    def groups(self) -> list[Group]:
        out: list[Group] = []
        for p in self.points:
            for g in (p.group, *((p.minus[0],) if p.minus else ())):
                if g not in out:
                    out.append(g)
        return out


def measure_figure(figure: SeedFigure, windows_of: WindowsOf) -> FigureResult:
    """Each point's level from its arms' windows (``windows_of(group, arm)``), then each shape's ratio."""
    levels = []
    for p in figure.points:
        what = f"seed figure {figure.id}, {p.series} at {p.x:g}: {p.group.id}/{p.arm} {figure.metric}"
        own = windows_of(p.group, p.arm)
        lv = level(p.series, p.x, block_means(own, figure.metric), what, p.seed, requests_per_window(own))
        if p.minus is not None:
            theirs = windows_of(*p.minus)
            other = level(p.series, p.x, block_means(theirs, figure.metric), what, None, requests_per_window(theirs))
            fewest = min((r for r in (lv.requests, other.requests) if r is not None), default=None)
            lv = replace(gap(lv, other), engines=2 if p.engines > 1 else 1, requests=fewest)
        levels.append(lv)
    by = {(lv.series, lv.x): lv for lv in levels}
    point = {(p.series, p.x): p for p in figure.points}
    shapes = []
    for s in figure.shapes:
        one = (point[s.num].group.engine == point[s.den].group.engine and by[s.num].engines == by[s.den].engines == 1)
        shapes.append(ratio_row(s.label, by[s.num], by[s.den], s.factor, s.side, 1 if one else 2))
    unit = metric(figure.metric).unit if is_known(figure.metric) else ""
    return FigureResult(figure.id, figure.title, figure.metric, unit, figure.draw, figure.x_label, figure.source,
                        tuple(levels), tuple(shapes))

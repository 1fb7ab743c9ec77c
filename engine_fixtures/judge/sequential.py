"""Measure until every judged cell is decided or the budget is spent (Pinpoint's rule: undecided is not a pass).

``Budget(initial, step, maximum)``: the first look comes after ``initial`` windows (or blocks, or rounds),
each further look after ``step`` more, never past ``maximum``. Every look tests at ``alpha / looks`` per
side (Bonferroni over the planned looks), so looking again cannot raise the false-alarm rate above alpha.

``measure_until_decided(budget, measure, undecided)`` calls ``measure(n)`` to add n windows and
``undecided(alpha_per_look)`` to judge what has been measured so far; it stops when ``undecided`` returns
nothing or the budget is spent, and returns the ``Progress`` (windows measured, looks, what stayed open).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from engine_fixtures.errors import ConfigError
from engine_fixtures.judge.decide import ALPHA
from engine_fixtures.judge.rows import Verdict

DEFAULT_REPEATS = 5  # windows (rounds, blocks) before the first look (--perf-repeats)
DEFAULT_MAX_REPEATS = 15  # the budget while a verdict is undecided (--perf-max-repeats)


@dataclass(frozen=True)
class Budget:
    initial: int
    step: int
    maximum: int

    def __post_init__(self) -> None:
        if not (1 <= self.initial <= self.maximum) or self.step < 1:
            raise ConfigError(f"measurement budget needs 1 <= initial <= maximum and step >= 1, got initial="
                              f"{self.initial}, step={self.step}, maximum={self.maximum}")

    @property
    def looks(self) -> int:
        return 1 + math.ceil((self.maximum - self.initial) / self.step)

    def alpha_per_look(self, alpha: float = ALPHA) -> float:
        return alpha / self.looks

    @classmethod
    def fixed(cls, n: int) -> Budget:
        return cls(n, 1, n)

    @classmethod
    def repeated(cls, repeats: int, max_repeats: int) -> Budget:
        """``--perf-repeats`` before the first look, as many again before each next, up to ``--perf-max-repeats``."""
        return cls(repeats, repeats, max(max_repeats, repeats))


@dataclass(frozen=True)
class Progress:
    measured: int
    looks: int
    undecided: tuple[str, ...]

    @property
    def decided(self) -> bool:
        return not self.undecided


CELL = "{label}: {metric}"  # an open cell, as open_cells names it


def open_cells(pools: Mapping[str, Sequence[Verdict]] | None = None,
               contrasts: Mapping[str, Sequence[Verdict]] | None = None) -> list[str]:
    """The one stopping rule of both tiers: the cells still undecided, ``<arm>: <metric>`` for an arm's rows
    against its pool, ``<contrast>: <metric>`` for a contrast's. A contrast with a violated row is decided (it fails
    whatever its other rows say), so its undecided rows do not keep the runner measuring."""
    out = [CELL.format(label=arm, metric=v.metric) for arm, rows in (pools or {}).items() for v in rows
           if v.status == "inconclusive"]
    for label, rows in (contrasts or {}).items():
        if not any(v.status == "regression" for v in rows):
            out += [CELL.format(label=label, metric=v.metric) for v in rows if v.status == "inconclusive"]
    return out


def label_of(cell: str) -> str:
    """The arm or contrast label of a cell ``open_cells`` named (metric names hold no ': ')."""
    return cell.rpartition(": ")[0]


def measure_until_decided(budget: Budget, measure: Callable[[int], None],
                          undecided: Callable[[float], Sequence[str]], alpha: float = ALPHA) -> Progress:
    """Grow the measurement in steps until ``undecided`` is empty or ``budget.maximum`` is reached."""
    a = budget.alpha_per_look(alpha)
    measure(budget.initial)
    done, looks = budget.initial, 1
    open_cells = tuple(undecided(a))
    while open_cells and done < budget.maximum:
        n = min(budget.step, budget.maximum - done)
        measure(n)
        done += n
        looks += 1
        open_cells = tuple(undecided(a))
    return Progress(done, looks, open_cells)

"""A counter bound's verdict: exact counts against a limit, no statistics (``scenarios.group.CounterBound``).

``at_most``: every value at or below the limit (IPC handle opens per image with the pool-handle cache: ~0, never
~1); ``at_least``: the peak over the values reaches it (the largest batch the scheduler ran reaches
min(concurrency, max_running_requests) when no hidden cap holds it). A per-segment metric has one value per
measured segment, on its first window, so ``windows`` (how many windows the arm had) may exceed ``len(values)``.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine_fixtures.errors import MeasurementError
from engine_fixtures.judge.rows import Verdict

KINDS = ("at_most", "at_least")


def judge_counter(label: str, metric: str, arm: str, kind: str, limit: float, values: Sequence[float],
                  windows: int) -> Verdict:
    """``pass`` where the bound holds over ``values``, else ``regression`` (an invariant violated)."""
    if kind not in KINDS:
        raise ValueError(f"counter kind {kind!r}: one of {', '.join(KINDS)}")
    if not values:
        raise MeasurementError(f"{metric} of {arm}: no value to hold against {label} (0 windows measured it)")
    seen = max(values)
    holds, rule = (seen >= limit, "peak") if kind == "at_least" else (seen <= limit, "worst value")
    over = f"{len(values)} windows" if len(values) == windows else f"{len(values)} values from {windows} windows"
    return Verdict(f"{metric} {label}", "pass" if holds else "regression", "bound", limit, seen, None, None, None,
                   len(values), f"{metric} of {arm}: {rule} {seen:.3g} over {over} ({kind.replace('_', ' ')} "
                   f"{limit:g}): {'holds' if holds else 'invariant violated'}", "linear")

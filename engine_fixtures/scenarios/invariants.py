"""``Invariant``: a relation between two arms measured in the same run, judged with ``judge_invariant``.

``Invariant(label, metric, reference, candidate, bound, paired)`` reads "candidate >= bound x reference in
the metric's good direction". ``paired`` invariants compare windows of the same round (arms interleaved in one
rig set: the CPU tier); unpaired ones compare two separately measured arms (separate engines). The
reference and candidate are arm ids in ``ScenarioResults``. A known upstream regression that breaks an invariant
is declared on the test, not here: ``@known_regression(SHM_COPY)`` makes it a strict expected failure with
``raises=InvariantViolated``, so a release that fixes it turns the run red until the declaration is updated.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Invariant:
    label: str
    metric: str
    reference: str
    candidate: str
    bound: float
    paired: bool = True
    why: str = ""

    @property
    def id(self) -> str:
        return self.label.replace(" ", "-")


@dataclass(frozen=True)
class CounterBound:
    """An exact count of one arm against a limit, no statistics: ``at_most`` every value stays at or below it
    (IPC handle opens per image with the pool-handle cache: ~0, never ~1); ``at_least`` the peak over the
    values reaches it (the largest batch the scheduler ran reaches min(concurrency, max_running_requests) when no
    hidden cap holds it). Both are per-segment metrics: one value per measured segment (visit), not per window."""

    label: str
    metric: str
    arm: str
    limit: float
    why: str = ""
    kind: str = "at_most"

    def __post_init__(self) -> None:
        if self.kind not in ("at_most", "at_least"):
            raise ValueError(f"CounterBound kind {self.kind!r}: use 'at_most' or 'at_least'")

    @property
    def id(self) -> str:
        return self.label.replace(" ", "-")

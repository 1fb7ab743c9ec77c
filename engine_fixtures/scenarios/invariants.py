"""``Invariant``: a relation between two arms measured in the same run, judged with ``judge_invariant``.

``Invariant(label, metric, reference, candidate, bound, paired)`` reads "candidate >= bound x reference in
the metric's good direction". ``paired`` invariants compare windows of the same round (arms interleaved in one
rig set: the mechanism tier); unpaired ones compare two separately measured arms (separate engines). The
reference and candidate are arm ids in ``ScenarioResults``. ``xfail_when`` names a known upstream regression
(``sglang_version`` ranges): the test carrying the invariant is then a strict expected failure with
``raises=InvariantViolated``, so a release that fixes it turns the run red until the marker is updated.
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
    """A mechanism counter that must stay at or below ``limit`` in every window of one arm (e.g. IPC handle
    opens per image with the pool-handle cache: ~0, never ~1). Counters are exact, so no statistics: one
    window above the limit violates it."""

    label: str
    metric: str
    arm: str
    limit: float
    why: str = ""

    @property
    def id(self) -> str:
        return self.label.replace(" ", "-")

"""The one rule that says whether a stored run of a scenario is *clean*: fit to describe the build.

A run of a scenario is clean when both hold:

- it measured the build as it is: none of its ``MARKS`` is set, i.e. no injected slowdown or fault
  (``injection``, ``--perf-inject``, a patched build) and no A/B comparison against a reference build
  (``reference``);
- it was not judged badly: its outcome for the scenario (the worst verdict of its rows and of the same-run
  invariants that compare it, ``ResultsFile.outcome``) is not one of ``BAD_OUTCOMES`` (``regression``,
  ``inconclusive``). ``pass``, ``improvement`` and ``unjudged`` (no verdict recorded: a first run on a new machine
  had no pool to be judged against, ``no-baseline``) are clean.

``unclean`` says which part fails (the mark's name or ``JUDGED``), ``is_clean`` whether none does. Every site that
picks clean runs asks it: the pools (``store.update.refusal``, hence ``plan_update`` and ``last_clean_runs``), the
run history (``HistoryStore.clean_candidates``, whose SQL filter is built from ``MARKS``; ``SeriesPoint.clean``),
``perf-baseline validate``'s rolling pools (``cli``) and the trend's levels (``report.trend``).

The sites differ in one point of intent, the parameter ``judged_bad``: with it, runs judged ``regression`` or
``inconclusive`` count as clean too. A pool takes them only with ``--accept REASON`` (the reason is stored with each
such run); ``validate`` and the trend ask only whether a run measured the build as it is, whatever it was judged
then (``validate`` re-judges it; a trend draws every run of the build, bad ones included, to find where it changed).

Not part of the rule: a pool is one host's, so ``store.update.refusal`` also refuses a run without a host record,
and ``plan_update`` a run of another host than the pool's; that is where a clean run may be pooled.
"""

from __future__ import annotations

from typing import Protocol

MARKS = ("injection", "reference")  # run fields: either one set (non-empty), the run did not measure the build as it is
BAD_OUTCOMES = ("regression", "inconclusive")
JUDGED = "judged"  # what ``unclean`` says of a run that is unclean only because of its verdicts


class Marked(Protocol):
    """A stored run, or one row or point of it: ``ResultsFile``, ``SeriesPoint``, a row of the history's runs."""

    @property
    def injection(self) -> str: ...

    @property
    def reference(self) -> str: ...


def unclean(run: Marked, outcome: str, *, judged_bad: bool = False) -> str | None:
    """Why ``run``, whose outcome for the scenario was ``outcome``, is not clean: the first of ``MARKS`` it sets,
    ``JUDGED`` for an outcome in ``BAD_OUTCOMES`` (never with ``judged_bad``), None when it is clean (the module
    docstring states the rule and what ``judged_bad`` is for)."""
    for mark in MARKS:
        if getattr(run, mark):
            return mark
    if outcome in BAD_OUTCOMES and not judged_bad:
        return JUDGED
    return None


def is_clean(run: Marked, outcome: str, *, judged_bad: bool = False) -> bool:
    """``unclean(...) is None``: the run of the scenario may serve as a reference (the module docstring)."""
    return unclean(run, outcome, judged_bad=judged_bad) is None

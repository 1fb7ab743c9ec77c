"""Verdicts for the report: every judged (arm, metric) ends ``pass``, ``regression``, ``improvement`` or
``inconclusive``; ``no-baseline`` and ``report-only`` (diagnostics) are the only other rows, and neither is a pass.

Three kinds of judgement, all through ``judge.decide``:
- ``history``: this run's windows against the pooled baseline of the scenario (``judge_result``);
- ``paired`` / ``group``: a contrast, candidate against reference measured in interleaved blocks on one engine or
  in fresh instance groups of separate launches (``judge.paired.judge_contrast``);
- ``bound``: a same-run invariant of the CPU tier such as "buffer >= 1.05 x torch", per round
  (``judge.paired.judge_invariant``).

A scenario's gating metrics (``judge.gating``) share one family-wise alpha (``decide.gate_alpha``); its other
judged metrics are report-only rows that still say what their judgement would have been.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Protocol

from engine_fixtures.errors import MeasurementError
from engine_fixtures.judge.decide import ALPHA, BETA, decide_history, gate_alpha
from engine_fixtures.judge.gating import arm_of, gating
from engine_fixtures.judge.metrics import SAME_BUILD, Metric, metric
from engine_fixtures.judge.noise import MIN_RUNS, NoiseModel
from engine_fixtures.judge.paired import judge_contrast, judge_invariant
from engine_fixtures.judge.rows import (
    STATUSES,
    VERDICTS,
    Kind,
    Status,
    Verdict,
    as_diagnostic,
    delta_of,
    diagnostic,
    level,
    message,
    with_interval,
    worse_change,
)

__all__ = ["STATUSES", "VERDICTS", "Kind", "PooledRuns", "Status", "Verdict", "diagnostic",
           "judge_contrast", "judge_invariant", "judge_metric", "judge_result", "worse_change"]

SHARE_PREFIX = "cpu_share_of_quota."
ZERO_SUM = ("under a binding quota the roles' shares are zero-sum: a starved role reads as an improvement and its "
            "neighbour as a regression, so only the share of the role the arm changes gates")
LEVEL_ACROSS_BUILDS = ("GPU busy gates between arms of one build (a live contrast, a live arm's rel. ratio to its "
                       "control); as a level against a pool a build whose kernels got faster would read as starved, so "
                       "req/s and TPOT judge the level")


class PooledRuns(Protocol):
    """What the judge needs of a stored baseline: per-run window values of a metric."""

    def runs_for(self, name: str) -> list[tuple[float, ...]]: ...


def judge_metric(m: Metric | str, runs: Sequence[Sequence[float]], current: Sequence[float], *,
                 alpha: float = ALPHA, floor: float | None = None) -> Verdict:
    """History judgement of one metric: ``current`` windows against the pooled baseline ``runs``; ``alpha`` is the
    cell's per-side alpha (already split over looks and the scenario's gating family)."""
    m = m if isinstance(m, Metric) else metric(m)
    if not current:
        raise MeasurementError(f"{m.name}: no windows measured; a metric with no data is an error, not a pass")
    cur_level = level(m, current)
    if not runs:
        return Verdict(m.name, "no-baseline", "history", None, cur_level, None, None, None, len(current),
                       f"{m.name}: no baseline", m.scale.name)
    model = NoiseModel.fit([m.scale.forward(r) for r in runs])
    if model.runs < MIN_RUNS:  # a pool still being built is not a baseline yet
        lvl = math.exp(model.level) if m.scale.name == "log" else model.level
        return Verdict(m.name, "no-baseline", "history", lvl, cur_level, delta_of(m, lvl, cur_level), None,
                       model.runs, len(current), f"{m.name}: the baseline pools {model.runs} run(s) and judges from "
                       f"{MIN_RUNS}; add {MIN_RUNS - model.runs} more independent run(s)", m.scale.name)
    d = decide_history(model, m.scale.forward(current), m.sign, m.floor_size(floor), alpha=alpha, beta=BETA,
                      max_detect=m.max_size)
    base_level = math.exp(model.level) if m.scale.name == "log" else model.level
    delta = delta_of(m, base_level, cur_level)
    detectable = worse_change(m, d.detectable) if d.detectable is not None else None
    v = Verdict(m.name, d.status, "history", base_level, cur_level, delta, detectable, model.runs,
                len(current), message(m, d, base_level, cur_level, delta, model.runs), m.scale.name)
    return with_interval(v, m, d, alpha)


def judge_result(samples: Mapping[str, Sequence[float]], baseline: PooledRuns | None, *, scenario: str,
                 alpha: float = ALPHA, floor: float | None = None) -> list[Verdict]:
    """Every metric of one run against its pooled baseline (None: no baseline for the scenario).

    ``alpha`` is per side and look; the scenario's gating metrics split it (``gate_alpha``). A gating metric that a
    pool able to judge it (>= ``MIN_RUNS`` runs) has but this run lacks is a ``MeasurementError`` (a measurement
    lost it), never a silently skipped row; a metric only a pool still being built has is gone without harm."""
    arm = arm_of(scenario)
    gate = set(gating(samples, arm))
    a = gate_alpha(alpha, max(1, len(gate)))
    verdicts = []
    for name, values in samples.items():
        m = metric(name)
        runs = baseline.runs_for(name) if baseline is not None else []
        if not m.judged:
            verdicts.append(diagnostic(m, values, runs))
            continue
        v = judge_metric(m, runs, values, alpha=a, floor=floor)
        if name not in gate:
            v = replace(v, gating=False)
            if v.is_verdict:
                v = as_diagnostic(v, ZERO_SUM if name.startswith(SHARE_PREFIX) else LEVEL_ACROSS_BUILDS
                                  if m.condition == SAME_BUILD and m.gates else
                                  f"not a gate of this scenario (gates: {', '.join(sorted(gate)) or 'none'})")
        verdicts.append(v)
    if baseline is not None:
        verdicts += _lost(baseline, samples, scenario, set(gating(_names(baseline), arm)))
    return verdicts


def _names(baseline: PooledRuns) -> list[str]:
    return list(getattr(baseline, "metric_names", lambda: [])())


def _lost(baseline: PooledRuns, samples: Mapping[str, Sequence[float]], scenario: str,
          gate: set[str]) -> list[Verdict]:
    """Rows (or errors) for metrics the pool has and this run did not measure."""
    out: list[Verdict] = []
    for name in _names(baseline):
        m = metric(name)
        runs = baseline.runs_for(name)
        if name in samples or not m.judged or len(runs) < MIN_RUNS:
            continue  # measured, a diagnostic, or only a pool being built has it (a vanished metric, no loss)
        if name in gate:
            lost = ("NVML's sample buffer gave no period in its windows (NVML unavailable, or the driver does not keep "
                    "it: the run's findings say which; nvidia-smi must work for this user)"
                    if "gpu_util_buffer" in name else "a sampler that did not run, a counter that stayed empty")
            raise MeasurementError(f"{scenario}: the baseline judges {name!r} but this run did not measure it; "
                                   f"the measurement lost a metric ({lost}): fix the measurement, or re-record the "
                                   "baseline without it")
    return out


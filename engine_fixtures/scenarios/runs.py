"""Measure an engine scenario until its verdicts are decided: against the pooled baseline, or A/B.

Windows come from ``SessionLoad.windows(engine, scenario, n, timeline)``: one load segment of ``n`` back-to-back
windows of ``--perf-window-s`` from the session's one load client (``scenarios.segment``).

``measure_history(engine, scenario, settings, judge, windows, timeline)``: ``--perf-repeats`` windows first, then
the same again while any metric's verdict (``judge(result, alpha)``) is inconclusive, up to
``--perf-max-repeats``. Returns the ``RunResult`` (arm proof checked by the caller).

``measure_ab(pair, scenario, settings, windows, timeline, instances=R)``: a candidate and a reference engine live
together (each with its own cgroup), one-window segments in blocks A B B A / B A A B so drift and order hit both
alike; each block gives one paired log-ratio (linear metrics: a difference) per metric. Two starts of one build
differ (an A/A pair of engines on the H200 read +15.8 % TPOT apart over 8 blocks), so with ``R >= 2`` fresh
engine pairs (``--perf-ab-blocks`` blocks each) the pair is the unit of the interval; with one pair the blocks
are, and the verdict says the instance offset is not in it. Returns both results and the paired verdicts.

Every result's metadata carries the arm's ``timeline`` (``scenarios.timeline``), the window length, the mean
completed requests per window, and ``window_instance``: the engine instance that served each window.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from engine_fixtures.engine.handle import EngineHandle
from engine_fixtures.isolation.pinning import CpuSplit
from engine_fixtures.judge.gating import gating
from engine_fixtures.judge.metrics import metric
from engine_fixtures.judge.sequential import Budget, measure_until_decided
from engine_fixtures.judge.verdicts import Verdict, judge_ab
from engine_fixtures.loadgen.stream import LoadStream
from engine_fixtures.options import Settings
from engine_fixtures.scenarios.engine import EngineScenario
from engine_fixtures.scenarios.segment import SegmentPlan, measure_segment
from engine_fixtures.scenarios.timeline import Timeline
from engine_fixtures.store.results import RunResult

FIRST_WARMUP_FACTOR = 3.0  # an engine instance's first segment warms up longer (JIT, allocator, first batches)


@dataclass
class SessionLoad:
    """The session's load: one long-lived client (``LoadStream``) and the window plan from the settings."""

    stream: LoadStream
    settings: Settings
    split: CpuSplit = field(default_factory=lambda: CpuSplit(None, None))
    warmed: set[str] = field(default_factory=set)

    def windows(self, engine: EngineHandle, scenario: EngineScenario, n: int, timeline: Timeline,
                requests: list[dict[str, Any]] | None = None) -> list[dict[str, float]]:
        first = engine.instance not in self.warmed
        warmup = self.settings.warmup_s * (FIRST_WARMUP_FACTOR if first else 1.0)
        plan = SegmentPlan(scenario.workload(), n, self.settings.window_s, warmup, self.settings.sample_hz)
        out = measure_segment(engine, self.stream, plan, timeline, engine.instance, requests=requests)
        self.warmed.add(engine.instance)
        return out


Judge = Callable[[RunResult, float], Sequence[Verdict]]
Windows = Callable[..., list[dict[str, float]]]  # (engine, scenario, n, timeline[, requests])


def budget_of(settings: Settings) -> Budget:
    return Budget(settings.repeats, settings.repeats, max(settings.max_repeats, settings.repeats))


def engine_result(engine: EngineHandle, scenario: EngineScenario, windows: list[dict[str, float]],
                  settings: Settings, extra: dict | None = None, suffix: str = "",
                  timeline: Timeline | None = None, instances: Sequence[str] | None = None,
                  key: str | None = None, arm: Mapping[str, str] | None = None) -> RunResult:
    """``instances``: the engine instance of each window (default: ``engine``'s for all); ``key`` and ``arm``: the
    storage key and axes when they are not the engine spec's (an arm switched live on it)."""
    names = sorted({k for w in windows for k in w})
    samples = {n: tuple(w[n] for w in windows if n in w) for n in names}
    done = [w["requests_per_s_counted"] * settings.window_s for w in windows if "requests_per_s_counted" in w]
    instances = list(instances) if instances is not None else [engine.instance] * len(windows)
    meta = {"sglang_version": engine.version, "engine_key": engine.spec.key, "ready_s": engine.ready_s,
            "build": engine.spec.build.label, "log": str(engine.log_path), "scenario_id": scenario.id,
            "window_s": settings.window_s, "warmup_s": settings.warmup_s,
            "window_requests": round(float(np.mean(done)), 1) if done else 0.0,
            "window_instance": instances, "engine_instances": sorted(set(instances)),
            "cpus": list(engine.spec.cpus) if engine.spec.cpus else None, **(extra or {})}
    if timeline is not None:
        meta["timeline"] = timeline.to_json()
    key = key if key is not None else EngineScenario.key(engine.spec, scenario) + suffix
    return RunResult(key, dict(arm) if arm is not None else engine.spec.arm, samples, metadata=meta)


def measure_history(engine: EngineHandle, scenario: EngineScenario, settings: Settings, judge: Judge,
                    windows_of: Windows, timeline: Timeline) -> RunResult:
    budget = budget_of(settings)
    windows: list[dict[str, float]] = []
    requests: list[dict[str, Any]] = []

    def measure(n: int) -> None:
        windows.extend(windows_of(engine, scenario, n, timeline, requests))

    def undecided(alpha: float) -> list[str]:
        result = engine_result(engine, scenario, windows, settings)
        return [v.metric for v in judge(result, alpha) if v.status == "inconclusive"]

    progress = measure_until_decided(budget, measure, undecided)
    seq = {"windows": progress.measured, "looks": progress.looks, "alpha_per_look": budget.alpha_per_look(),
           "budget_windows": budget.maximum, "undecided_at_budget": list(progress.undecided), "requests": requests}
    timeline.close()
    return engine_result(engine, scenario, windows, settings, seq, timeline=timeline)


@dataclass(frozen=True)
class ABOutcome:
    candidate: RunResult
    reference: RunResult
    verdicts: tuple[Verdict, ...]
    blocks: int


def block_effects(block: Sequence[tuple[str, dict[str, float]]], name: str) -> float | None:
    """One block's candidate-vs-reference effect for ``name``: mean log(B) - mean log(A) (linear: B - A)."""
    m = metric(name)
    a = [w[name] for who, w in block if who == "A" and name in w]
    b = [w[name] for who, w in block if who == "B" and name in w]
    if not a or not b:
        return None
    if m.scale.name == "log":
        return float(np.mean(np.log(b)) - np.mean(np.log(a)))
    return float(np.mean(b) - np.mean(a))


def judge_blocks(blocks: list[list[tuple[str, dict[str, float]]]], budget: int, alpha: float,
                 floor: float | None, groups: Sequence[int] | None = None, detect: float | None = None,
                 arm: Mapping[str, str] | None = None) -> list[Verdict]:
    """Paired verdicts per gating metric (``judge.gating``: throughput, TTFT p50, TPOT p50, the CPU of the role the
    arm changes, the mechanism counters), the family's alpha shared among them; each pass excludes the metric's
    declared A/B size (``detect``: ``--perf-ab-detect``). With ``groups`` (the engine-instance pair each block was
    measured on) naming two or more pairs, the unit is the pair: its blocks' mean effect, so the offset between
    two instances of one build (an engine start) is inside the interval; ``budget`` then counts pairs."""
    judged = {k for blk in blocks for _, w in blk for k in w if metric(k).judged and metric(k).condition is None}
    names = gating(judged, arm or {})
    grouped = groups is not None and len(set(groups)) >= 2
    out = []
    for name in names:
        per_block = [block_effects(b, name) for b in blocks]
        if grouped:
            by: dict[int, list[float]] = {}
            for g, e in zip(groups, per_block, strict=True):
                if e is not None and math.isfinite(e):
                    by.setdefault(g, []).append(e)
            effects = [float(np.mean(v)) for _, v in sorted(by.items())]
        else:
            effects = [e for e in per_block if e is not None and math.isfinite(e)]
        ref = [w[name] for b in blocks for who, w in b if who == "A" and name in w]
        cand = [w[name] for b in blocks for who, w in b if who == "B" and name in w]
        v = judge_ab(name, ref, cand, effects, budget=budget, alpha=alpha, floor=floor, detect=detect,
                     family=len(names), arm=arm)
        if not grouped:
            v = replace(v, message=v.message + "; one engine instance per build: the offset between two starts of "
                                               "one build is not in this interval (--perf-ab-instances 3)")
        out.append(v)
    return out


Pair = tuple[EngineHandle, EngineHandle]  # (candidate, reference)


def measure_ab(pair: Callable[[int], Pair], scenario: EngineScenario, settings: Settings, windows_of: Windows,
               timeline: Timeline, instances: int = 1) -> ABOutcome:
    """A/B with ``instances`` engine-instance pairs (``pair(i)`` gives pair i ready, the previous one stopped and its
    arm proof checked). Several pairs: the pair is the unit, each gets ``--perf-ab-blocks`` blocks, and more pairs
    are added while undecided (up to twice as many). One pair: blocks are the unit and more blocks are added while
    undecided."""
    blocks: list[list[tuple[str, dict[str, float]]]] = []
    groups: list[int] = []
    served: dict[str, list[str]] = {"A": [], "B": []}  # the engine instance of each window, per build
    current: dict[str, Pair] = {}
    first = random.choice(("ABBA", "BAAB"))  # neither build always measures first
    second = "BAAB" if first == "ABBA" else "ABBA"

    def run_blocks(n: int, g: int) -> None:
        cand, ref = current["pair"]
        engines = {"A": ref, "B": cand}
        for _ in range(n):
            order = first if len(blocks) % 2 == 0 else second
            block = []
            for who in order:
                block.append((who, windows_of(engines[who], scenario, 1, timeline)[0]))
                served[who].append(engines[who].instance)
            blocks.append(block)
            groups.append(g)

    if instances <= 1:
        budget = budget_of(settings)
        current["pair"] = pair(0)

        def measure(n: int) -> None:
            run_blocks(n, 0)
    else:
        budget = Budget(instances, 1, 2 * instances)

        def measure(n: int) -> None:
            for _ in range(n):
                g = len(set(groups))
                current["pair"] = pair(g)
                run_blocks(settings.ab_blocks, g)

    def undecided(alpha: float) -> list[str]:
        return [v.metric for v in judge_blocks(blocks, budget.maximum, alpha, settings.floor, groups,
                                               settings.ab_detect, current["pair"][0].spec.arm)
                if v.status == "inconclusive"]

    progress = measure_until_decided(budget, measure, undecided)
    alpha = budget.alpha_per_look()
    arm = current["pair"][0].spec.arm
    verdicts = judge_blocks(blocks, budget.maximum, alpha, settings.floor, groups, settings.ab_detect, arm)
    candidate, reference = current["pair"]
    timeline.close()
    seq = {"blocks": len(blocks), "instance_pairs": len(set(groups)), "looks": progress.looks,
           "alpha_per_look": alpha, "reference_build": reference.spec.build.label,
           "candidate_build": candidate.spec.build.label, "block_pair": list(groups),
           "block_effects": {v.metric: [block_effects(b, v.metric) for b in blocks] for v in verdicts}}
    cand = engine_result(candidate, scenario, [w for b in blocks for who, w in b if who == "B"], settings, seq,
                         timeline=timeline, instances=served["B"])
    ref = engine_result(reference, scenario, [w for b in blocks for who, w in b if who == "A"], settings, seq,
                        "/build=reference", timeline=timeline, instances=served["A"])
    return ABOutcome(cand, ref, tuple(verdicts), len(blocks))

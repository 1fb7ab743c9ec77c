"""Measure an engine scenario until its verdicts are decided against this host's pooled baseline.

Windows come from ``SessionLoad.windows(engine, scenario, n, timeline)``: one load segment of ``n`` back-to-back
windows of ``--perf-window-s`` from the session's one load client (``scenarios.segment``).

``measure_history(engine, scenario, settings, judge, windows, timeline)``: ``--perf-repeats`` windows first, then
the same again while any metric's verdict (``judge(result, alpha)``) is inconclusive, up to
``--perf-max-repeats``. Returns the ``RunResult`` (arm proof checked by the caller).

The A/B of two builds is a group of engines (``scenarios.groups``), measured by the session's group runner.

Every result's metadata carries the arm's ``timeline`` (``scenarios.timeline``), the window length, the mean
completed requests per window, and ``window_instance``: the engine instance that served each window.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine_fixtures.engine.handle import EngineHandle
from engine_fixtures.errors import MeasurementError
from engine_fixtures.isolation.pinning import CpuSplit
from engine_fixtures.judge.sequential import Budget, measure_until_decided
from engine_fixtures.judge.verdicts import Verdict
from engine_fixtures.loadgen.stream import LoadStream
from engine_fixtures.loadgen.workload import WorkloadSpec
from engine_fixtures.options import Settings
from engine_fixtures.scenarios.engine import EngineScenario
from engine_fixtures.scenarios.segment import SegmentPlan, measure_segment
from engine_fixtures.scenarios.timeline import Timeline
from engine_fixtures.store.results import RunResult

FIRST_WARMUP_FACTOR = 3.0  # an engine instance's first segment warms up longer (JIT, allocator, first batches)
FIRST_LIGHT_S = 5.0  # one probe segment of load on a fresh engine
FIRST_LIGHT_DEADLINE_S = 180.0  # a fresh engine that cannot complete a full concurrency by then is an error


@dataclass
class SessionLoad:
    """The session's load: one long-lived client (``LoadStream``), the window plan from the settings, and which
    engine instances it has warmed (``first_light``)."""

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

    def first_light(self, engine: EngineHandle, workload: WorkloadSpec, timeline: Timeline) -> None:
        """Load a fresh engine until one probe segment completes as many requests as the concurrency: its first
        requests compile kernels, which on a fresh machine takes seconds (a cuda_ipc engine on a fresh H200 served
        nothing in its first 6 s, 2026-12-02), and no measured window may meet that. A condition with a deadline,
        never a fixed wait; an engine that completes nothing by then is a MeasurementError."""
        if engine.instance in self.warmed:
            return
        deadline = time.monotonic() + FIRST_LIGHT_DEADLINE_S
        with timeline.span("warmup", f"first light of {engine.instance}", engine.instance):
            while True:
                seg = self.stream.segment(engine.url, workload, 0.0, FIRST_LIGHT_S)
                done = len(seg.completed_in(seg.measure_at, seg.stop_at))
                if done >= workload.concurrency:
                    break
                engine.ensure_alive()
                if time.monotonic() > deadline:
                    raise MeasurementError(f"engine {engine.instance} completed {done} of {workload.concurrency} "
                                           f"requests in {FIRST_LIGHT_S:g} s after {FIRST_LIGHT_DEADLINE_S:g} s of "
                                           f"load: it never came up to speed; see {engine.log_path}")
        self.warmed.add(engine.instance)


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

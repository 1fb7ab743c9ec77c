"""One engine measured against this host's pooled baseline, and an engine's windows as a ``RunResult``.

Windows come from ``SessionLoad.windows(engine, scenario, n, timeline)`` (``scenarios.load``).

``measure_history(engine, scenario, settings, judge, windows, timeline)``: ``--perf-repeats`` windows first, then
the same again while any metric's verdict (``judge(result, alpha)``) is inconclusive, up to
``--perf-max-repeats``. Returns the ``RunResult`` (arm proof checked by the caller).

``engine_result(engine, scenario, windows, settings, ...)``: what every GPU runner records (live arms, groups of
engines, per-arm launches). The A/B of two builds is a group of engines (``scenarios.groups``). Every result's
metadata carries the arm's ``timeline`` (``scenarios.timeline``), the window length, the mean
completed requests per window, ``window_instance``: the engine instance that served each window, and
``sample_windows``: for each metric not in every window (the per-segment values, ``scenarios.segment``), the windows
its samples came from (``RunResult.windows_of``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from engine_fixtures.engine.handle import EngineHandle
from engine_fixtures.judge.sequential import Budget, measure_until_decided
from engine_fixtures.judge.verdicts import Verdict
from engine_fixtures.options import Settings
from engine_fixtures.scenarios.engine import EngineScenario
from engine_fixtures.scenarios.timeline import Timeline
from engine_fixtures.store.results import SAMPLE_WINDOWS_KEY, RunResult

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
    sparse = {n: [i for i, w in enumerate(windows) if n in w] for n in names if len(samples[n]) < len(windows)}
    done = [w["requests_per_s_counted"] * settings.window_s for w in windows if "requests_per_s_counted" in w]
    instances = list(instances) if instances is not None else [engine.instance] * len(windows)
    meta = {"sglang_version": engine.version, "engine_key": engine.spec.key, "ready_s": engine.ready_s,
            "build": engine.spec.build.label, "log": str(engine.log_path), "scenario_id": scenario.id,
            "window_s": settings.window_s, "warmup_s": settings.warmup_s,
            "window_requests": round(float(np.mean(done)), 1) if done else 0.0,
            "window_instance": instances, "engine_instances": sorted(set(instances)), SAMPLE_WINDOWS_KEY: sparse,
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

"""``GpuRunner``: what the GPU tier's two runners share (``live_runner.LiveGroupRunner``, one engine with its arms
switched live; ``engine_runner.EngineScenarioRunner``, a launch per arm and the A/B).

Both hold the test's request, the session's engine factory, recorder, registry, model directory and load client;
``engines(specs, timeline)`` gets ready engines from the factory (a group of several through ``engine.group``: one at a
time, equal KV pools) with their starts and quota changes timed into the timeline and their log tails attached to a
failing test; ``first_light(engine, workload, timeline)`` loads a fresh engine until it completes a full concurrency
(its first requests compile kernels); ``drive(url, workload)`` is the load for a profile window.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from engine_fixtures.engine.factory import EngineFactory
from engine_fixtures.engine.group import start_group
from engine_fixtures.engine.handle import EngineHandle
from engine_fixtures.engine.spec import EngineSpec
from engine_fixtures.loadgen.workload import WorkloadSpec
from engine_fixtures.scenarios.load import SessionLoad
from engine_fixtures.scenarios.timeline import Timeline
from engine_fixtures.session import sections
from engine_fixtures.session.recorder import PerfRecorder
from engine_fixtures.session.registry import ScenarioResults


class GpuRunner:
    def __init__(self, request: pytest.FixtureRequest, factory: EngineFactory, recorder: PerfRecorder,
                 results: ScenarioResults, model: Path, load: SessionLoad) -> None:
        self.request = request
        self.factory = factory
        self.recorder = recorder
        self.session = recorder.session
        self.results = results
        self.model = model
        self.load = load

    @property
    def settings(self):  # type: ignore[no-untyped-def]
        return self.session.settings

    def engines(self, specs: Sequence[EngineSpec], timeline: Timeline) -> tuple[EngineHandle, ...]:
        """Ready engines for ``specs`` (a group: one at a time, equal KV pools); starts and quota changes are timed."""
        started, changes, t0 = self.factory.started, self.factory.quota_changes, time.monotonic()
        engines = start_group(self.factory, specs) if len(specs) > 1 else (self.factory.get(specs[0]),)
        t1 = time.monotonic()
        names = ", ".join(e.instance for e in engines)
        if self.factory.started > started:
            timeline.add("engine", f"start {names}", t0, t1, names)
        elif self.factory.quota_changes > changes:
            timeline.add("quota", f"quota -> {specs[0].cpu_quota} on {names}", t0, t1, names)
        for e in engines:
            sections.add_on_failure(self.request.node, f"engine log (tail) {e.spec.build.label} {e.instance}",
                                    e.log_tail)
        return tuple(engines)

    def first_light(self, engine: EngineHandle, workload: WorkloadSpec, timeline: Timeline) -> None:
        """``SessionLoad.first_light``: load a fresh engine until it completes a full concurrency."""
        self.load.first_light(engine, workload, timeline)

    def drive(self, url: Callable[[], str], workload: WorkloadSpec) -> Callable[[float], int]:
        """Load for a profile window (after the verdicts, never measured): the requests completed in it. ``url`` is
        asked at the start of each window (a live arm is switched there first)."""
        def drive(seconds: float) -> int:
            seg = self.load.stream.segment(url(), workload, self.settings.warmup_s, seconds)
            return len(seg.completed_in(seg.measure_at, seg.stop_at))
        return drive

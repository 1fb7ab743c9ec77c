"""``SessionLoad``: the session's load, one long-lived client (``loadgen.stream.LoadStream``) on its own CPUs, the
settings, and which engine instances it has warmed.

``first_light(engine, workload, timeline)``: load a fresh engine until it completes a full concurrency, so that no
measured window meets its kernel compilation. The runner (``scenarios.runner``) and the A/B study measure through it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from engine_fixtures.engine.handle import EngineHandle
from engine_fixtures.errors import MeasurementError
from engine_fixtures.isolation.pinning import CpuSplit
from engine_fixtures.loadgen.stream import LoadStream
from engine_fixtures.loadgen.workload import WorkloadSpec
from engine_fixtures.options import Settings
from engine_fixtures.scenarios.timeline import Timeline

FIRST_LIGHT_S = 5.0  # one probe segment of load on a fresh engine, at most (two windows where they are shorter)
FIRST_LIGHT_DEADLINE_S = 180.0  # a fresh engine that cannot complete a full concurrency by then is an error


@dataclass
class SessionLoad:
    """The session's load: one long-lived client (``LoadStream``), the window plan from the settings, and which
    engine instances it has warmed (``first_light``)."""

    stream: LoadStream
    settings: Settings
    split: CpuSplit = field(default_factory=lambda: CpuSplit(None, None))
    warmed: set[str] = field(default_factory=set)

    def first_light(self, engine: EngineHandle, workload: WorkloadSpec, timeline: Timeline) -> None:
        """Load a fresh engine until one probe segment completes as many requests as the concurrency: its first
        requests compile kernels, which on a fresh machine takes seconds (a cuda_ipc engine on a fresh H200 served
        nothing in its first 6 s, 2026-12-02), and no measured window may meet that. A condition with a deadline,
        never a fixed wait; an engine that completes nothing by then is a MeasurementError."""
        if engine.instance in self.warmed:
            return
        deadline = time.monotonic() + FIRST_LIGHT_DEADLINE_S
        # 5 s on the GPU tier's 3 s windows; two windows where they are shorter (the stub engines' 0.3-0.5 s): the
        # probe only has to outlast the engine's first wave, and a shorter one that must still complete a full
        # concurrency is the stricter test
        probe = min(FIRST_LIGHT_S, 2 * self.settings.window_s)
        with timeline.span("warmup", f"first light of {engine.instance}", engine.instance):
            while True:
                seg = self.stream.segment(engine.url, workload, 0.0, probe)
                done = len(seg.completed_in(seg.measure_at, seg.stop_at))
                if done >= workload.concurrency:
                    break
                engine.ensure_alive()
                if time.monotonic() > deadline:
                    raise MeasurementError(f"engine {engine.instance} completed {done} of {workload.concurrency} "
                                           f"requests in {probe:g} s after {FIRST_LIGHT_DEADLINE_S:g} s of "
                                           f"load: it never came up to speed; see {engine.log_path}")
        self.warmed.add(engine.instance)

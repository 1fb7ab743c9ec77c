"""``scenarios.segment``'s per-window values and stored requests on synthetic segments (no engine, no samplers:
a fixed CPU reading stands in for the cut of the CPU sampler)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from engine_fixtures.errors import MeasurementError
from engine_fixtures.judge.metrics import metric
from engine_fixtures.loadgen.stream import Segment
from engine_fixtures.scenarios.segment import REQUEST_COLUMNS, stored_window, window_requests, window_values
from perf_tests.support.lockstep import closed_loop, segment_of

C, PERIOD, WINDOW = 16, 0.65, 3.0
SCHEDULER_CORES = 0.8  # the scheduler's CPU over every window


class FixedCpu:
    """The cut a CPU sampler would give: a constant number of cores for the scheduler."""

    def cut(self, t0: float, t1: float) -> dict[str, float]:
        return {"cpu.scheduler.cores": SCHEDULER_CORES}


SAMPLERS = SimpleNamespace(active=(FixedCpu(),))


def lockstep_segment(seconds: float = 64.0) -> Segment:
    return segment_of(closed_loop(C, PERIOD, seconds, jitter_s=0.004, tokens=32), C, 1.3, 60.0)


def values_of(seg: Segment, n: int = 20) -> list[dict[str, float]]:
    marks = [seg.measure_at + k * WINDOW for k in range(n)]
    return [window_values(seg, SAMPLERS, t0, t0 + WINDOW) for t0 in marks]  # type: ignore[arg-type]


def cv(values: list[float]) -> float:
    return float(np.std(values, ddof=1) / np.mean(values))


def test_req_per_s_is_continuous_and_the_count_is_a_diagnostic() -> None:
    windows = values_of(lockstep_segment())
    counted = [w["requests_per_s_counted"] for w in windows]
    assert set(np.round(counted, 2)) == {round(64 / 3, 2), round(80 / 3, 2)}
    assert cv([w["requests_per_s"] for w in windows]) < 0.01 < 0.05 < cv(counted)
    assert cv([w["output_tokens_per_s"] for w in windows]) < 0.01
    assert not metric("requests_per_s_counted").judged


def test_cpu_per_request_divides_by_the_continuous_rate() -> None:
    windows = values_of(lockstep_segment())
    for w in windows:
        assert w["cpu_s_per_request.scheduler"] == pytest.approx(SCHEDULER_CORES / w["requests_per_s"])
    per_request = [w["cpu_s_per_request.scheduler"] for w in windows]
    by_count = [SCHEDULER_CORES / w["requests_per_s_counted"] for w in windows]
    # The same CPU reading over a counted denominator would inherit the bursts' quantization.
    assert cv(per_request) < 0.01 < 0.05 < cv(by_count)
    assert np.mean(per_request) == pytest.approx(SCHEDULER_CORES * PERIOD / C, rel=0.01)


def test_latencies_stay_over_the_requests_that_finished_in_the_window() -> None:
    seg = lockstep_segment()
    t0 = seg.measure_at
    done = seg.completed_in(t0, t0 + WINDOW)
    w = window_values(seg, SAMPLERS, t0, t0 + WINDOW)  # type: ignore[arg-type]
    assert w["ttft_p50_ms"] == pytest.approx(float(np.percentile([r.ttft_s for r in done], 50)) * 1000)
    assert w["tpot_p50_ms"] == pytest.approx(float(np.percentile([r.tpot_s for r in done], 50)) * 1000)


def test_a_window_without_a_completion_is_an_error_not_a_zero() -> None:
    seg = segment_of(closed_loop(2, 10.0, 30.0), 2, 0.0, 30.0)  # requests end at 10, 20, 30 s only
    with pytest.raises(MeasurementError, match="zero completed requests"):
        window_values(seg, SAMPLERS, seg.start + 11.0, seg.start + 14.0)  # type: ignore[arg-type]


def test_stored_requests_recompute_the_window_values() -> None:
    seg = lockstep_segment()
    for k in range(5):
        t0 = seg.measure_at + k * WINDOW
        stored = window_requests(seg, t0, t0 + WINDOW)
        assert stored["columns"] == list(REQUEST_COLUMNS)
        assert stored["origin_s"] == seg.start
        assert stored["t0_s"] == pytest.approx(t0 - seg.start, abs=1e-4)
        lo, hi, records = stored_window(stored)
        # Every request whose lifetime overlaps the window, no other.
        assert len(records) == sum(1 for r in seg.records if r.sent_s < hi and r.end_s >= lo)
        w = window_values(seg, SAMPLERS, t0, t0 + WINDOW)  # type: ignore[arg-type]
        again = segment_of(records, C, 0.0, 1.0, start=seg.start)
        # Times are kept to 0.1 ms: the share of each of the <= 2C requests on an edge moves by at most 1e-4 s over
        # its lifetime (> 0.6 s here); the requests inside keep a share of exactly 1.
        tol = 2 * C * 1e-4 / 0.6 / WINDOW
        assert again.progress_rate(seg.start + lo, seg.start + hi) == pytest.approx(w["requests_per_s"], abs=tol)
        assert len(again.completed_in(seg.start + lo, seg.start + hi)) / WINDOW == w["requests_per_s_counted"]
        ttft = np.percentile([r.ttft_s for r in again.completed_in(seg.start + lo, seg.start + hi)], 50) * 1000
        assert ttft == pytest.approx(w["ttft_p50_ms"], abs=0.1)


def test_stored_windows_from_another_format_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="needs t0_s, t1_s, columns and rows"):
        stored_window({"rows": []})
    with pytest.raises(ValueError, match="another version"):
        stored_window({"t0_s": 0, "t1_s": 3, "columns": ["end_s", "sent_s"], "rows": []})

"""The window estimators of ``loadgen.stream`` on synthetic closed-loop records: counted completions are quantized
by lockstep bursts, the time-weighted progress rate is not; a request spanning a window edge splits its share; over
a long steady stream both agree within one burst over the window's length; tokens count at their own timestamps."""

from __future__ import annotations

import numpy as np
import pytest

from engine_fixtures.errors import MeasurementError
from engine_fixtures.loadgen.records import RequestRecord
from engine_fixtures.loadgen.stream import finished_in, progress_rate, tokens_in
from perf_tests.support.lockstep import closed_loop, segment_of

C, PERIOD = 16, 0.65  # 24.6 req/s in bursts of 16 (the H200's 4B at c=16): 4.6 bursts per 3 s window


def rec(sent: float, end: float, times: tuple[float, ...] = (), tokens: int = 1) -> RequestRecord:
    return RequestRecord(0, False, sent, sent, end, times or (end,), tokens, "usage")


def windows(start: float, length: float, n: int) -> list[tuple[float, float]]:
    return [(start + k * length, start + (k + 1) * length) for k in range(n)]


def test_lockstep_bursts_quantize_the_count_but_not_the_progress_rate() -> None:
    records = closed_loop(C, PERIOD, 70.0, jitter_s=0.004)
    cuts = windows(1.3, 3.0, 20)  # 3 s windows hold 4 or 5 bursts of 16, depending on where they fall
    counted = np.array([len(finished_in(records, lo, hi)) / 3.0 for lo, hi in cuts])
    continuous = np.array([progress_rate(records, lo, hi) for lo, hi in cuts])
    assert set(np.round(counted, 2)) == {round(64 / 3, 2), round(80 / 3, 2)}  # whole bursts only
    cv_counted = counted.std(ddof=1) / counted.mean()
    cv_continuous = continuous.std(ddof=1) / continuous.mean()
    assert cv_counted > 0.05
    # 4 ms of jitter on a 0.65 s lifetime moves a window's progress by well under 1 %.
    assert cv_continuous < 0.01
    assert continuous.mean() == pytest.approx(C / PERIOD, rel=0.01)


def test_a_request_spanning_a_window_edge_splits_its_share() -> None:
    records = [rec(2.0, 4.0), rec(3.5, 4.5)]
    # [0, 3): request 0 spends 1 of its 2 s there (half its share), request 1 none.
    assert progress_rate(records, 0.0, 3.0) == pytest.approx(0.5 / 3)
    assert progress_rate(records, 3.0, 6.0) == pytest.approx((0.5 + 1.0) / 3)
    assert [len(finished_in(records, *w)) for w in windows(0.0, 3.0, 2)] == [0, 2]
    # A request with no lifetime counts whole where it ended, like a completion.
    assert progress_rate([rec(1.0, 1.0)], 0.0, 2.0) == pytest.approx(0.5)
    assert progress_rate([rec(1.0, 1.0)], 1.5, 2.0) == 0.0


def test_shares_of_every_request_sum_to_one_over_windows_that_tile_its_life() -> None:
    records = closed_loop(C, PERIOD, 30.0, stagger=True, jitter_s=0.05, seed=3)
    total = sum(progress_rate(records, lo, hi) * (hi - lo) for lo, hi in windows(0.0, 0.7, 45))
    assert total == pytest.approx(len(records), rel=1e-9)


@pytest.mark.parametrize("stagger", [False, True], ids=["lockstep", "staggered"])
def test_progress_equals_the_count_within_one_burst_over_the_window(stagger: bool) -> None:
    """counted - progress = (shares before t0 of requests in flight at t0 that end inside) - (shares inside of
    requests in flight at t1): each term is at most the requests in flight, C, so |rate difference| <= C / T."""
    records = closed_loop(C, PERIOD, 400.0, stagger=stagger, jitter_s=0.004, seed=1)
    for lo, hi in [(20.0, 380.0), *windows(20.0, 3.0, 100)]:
        counted = len(finished_in(records, lo, hi)) / (hi - lo)
        assert abs(progress_rate(records, lo, hi) - counted) <= C / (hi - lo) + 1e-9
    long_counted = len(finished_in(records, 20.0, 380.0)) / 360.0
    assert progress_rate(records, 20.0, 380.0) == pytest.approx(long_counted, abs=C / 360.0)
    assert long_counted == pytest.approx(C / PERIOD, abs=C / 360.0)


def test_tokens_count_at_their_own_timestamps() -> None:
    # 4 content chunks carrying 8 tokens (the usage count): each chunk is 2 tokens.
    r = rec(0.0, 4.0, (0.5, 1.5, 2.5, 3.5), tokens=8)
    assert tokens_in([r], 0.0, 2.0) == pytest.approx(4.0)
    assert tokens_in([r], 2.0, 4.0) == pytest.approx(4.0)
    assert tokens_in([r], 3.6, 9.0) == 0.0
    records = closed_loop(C, PERIOD, 70.0, jitter_s=0.004, tokens=32)
    per_window = [tokens_in(records, lo, hi) / 3.0 for lo, hi in windows(1.3, 3.0, 20)]
    assert np.std(per_window, ddof=1) / np.mean(per_window) < 0.01


def test_segment_methods_use_absolute_times() -> None:
    records = closed_loop(C, PERIOD, 20.0)
    seg = segment_of(records, C, 2.0, 15.0)
    t0, t1 = seg.measure_at, seg.measure_at + 3.0
    assert seg.progress_rate(t0, t1) == progress_rate(records, 2.0, 5.0)
    assert seg.completed_in(t0, t1) == finished_in(records, 2.0, 5.0)
    assert seg.output_tokens_in(t0, t1) == tokens_in(records, 2.0, 5.0)


def test_an_empty_window_has_no_rate() -> None:
    with pytest.raises(MeasurementError, match="empty rate window"):
        progress_rate([rec(0.0, 1.0)], 2.0, 2.0)

"""A counter bound's verdict (``judge.counters``): exact counts against a limit, and no values is an error."""

from __future__ import annotations

import pytest

from engine_fixtures.errors import MeasurementError
from engine_fixtures.judge.counters import judge_counter


def test_at_most_holds_only_while_every_value_does() -> None:
    ok = judge_counter("cache on opens ~0", "ipc_opens_per_image", "on", "at_most", 0.1, [0.0, 0.02, 0.0], 6)
    bad = judge_counter("cache on opens ~0", "ipc_opens_per_image", "on", "at_most", 0.1, [0.0, 1.0, 0.0], 3)
    assert (ok.status, bad.status) == ("pass", "regression")
    assert ok.message.endswith("(at most 0.1): holds")
    assert "3 values from 6 windows" in ok.message  # a per-segment metric: one value a segment
    assert "worst value 1 over 3 windows" in bad.message


def test_at_least_reads_the_peak() -> None:
    v = judge_counter("no hidden cap", "running_requests_max", "pp", "at_least", 16, [8, 16, 12], 3)
    assert (v.status, v.current, v.baseline) == ("pass", 16, 16)
    assert judge_counter("no hidden cap", "running_requests_max", "pp", "at_least", 16, [8, 8], 2).status == (
        "regression")


def test_no_value_is_an_error_and_a_kind_is_checked() -> None:
    with pytest.raises(MeasurementError, match="no value"):
        judge_counter("x", "running_requests_max", "pp", "at_least", 16, [], 0)
    with pytest.raises(ValueError, match="at_most, at_least"):
        judge_counter("x", "running_requests_max", "pp", "exactly", 16, [16], 1)

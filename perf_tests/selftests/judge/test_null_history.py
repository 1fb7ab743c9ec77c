"""This host's A/A history: null A/B runs recorded per host and load shape, pooled only where measured alike, never
read from another host, and a corrupted file named with its fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine_fixtures.errors import BaselineError
from engine_fixtures.machine import HostIdentity
from engine_fixtures.store.baselines import BaselineStore
from engine_fixtures.store.null_history import NullHistory, null_entry, shape_key

HERE = HostIdentity(("GPU-aaaa",), "cpu", 2000.0, "6.1", "runner-a")
THERE = HostIdentity(("GPU-bbbb",), "cpu", 2000.0, "6.1", "runner-b")
KEY = "engine/transport=cpu/tp=1/pp=1/copy=buffer/model=qwen3-vl-4b/c=16"


def test_null_runs_pool_on_this_host_only_and_only_when_measured_alike(tmp_path: Path) -> None:
    shape = shape_key(KEY, None)
    assert shape == "model=qwen3-vl-4b/c=16/quota=none"
    assert shape_key(KEY + "/live", 4.0) == "model=qwen3-vl-4b/c=16/quota=4"
    history = NullHistory(tmp_path, "h200", HERE)
    assert history.sample(shape, "tpot_p50_ms", 2, 3.0) is None
    history.record(shape, null_entry("run-1", 2, 3.0, {"tpot_p50_ms": [0.02, -0.01, float("nan")]}))
    path = history.record(shape, null_entry("run-2", 2, 3.0, {"tpot_p50_ms": [0.03]}))
    history.record(shape, null_entry("run-3", 1, 3.0, {"tpot_p50_ms": [0.5]}))  # other blocks per pair: not pooled
    sample = history.sample(shape, "tpot_p50_ms", 2, 3.0)
    assert sample is not None
    assert sample.units == 3
    assert sample.sum_sq == pytest.approx(0.02 ** 2 + 0.01 ** 2 + 0.03 ** 2)
    assert "2 null run(s)" in sample.source
    assert path.parent.name == "ab-null"
    assert BaselineStore(tmp_path, "h200").scenarios() == []  # beside the pools, never read as one
    assert NullHistory(tmp_path, "h200", THERE).sample(shape, "tpot_p50_ms", 2, 3.0) is None
    assert NullHistory(tmp_path, "h200", None).sample(shape, "tpot_p50_ms", 2, 3.0) is None


def test_a_corrupted_history_is_named_with_its_fix(tmp_path: Path) -> None:
    history = NullHistory(tmp_path, "h200", HERE)
    shape = shape_key(KEY, None)
    path = history.path_for(shape)
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    with pytest.raises(BaselineError, match=r"A/A history .* is corrupted .*delete it"):
        history.sample(shape, "tpot_p50_ms", 2, 3.0)
    path.write_text('{"format_version": 99}')
    with pytest.raises(BaselineError, match="not a format_version 1 file"):
        history.sample(shape, "tpot_p50_ms", 2, 3.0)

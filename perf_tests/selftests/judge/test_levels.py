"""The seed figures' rows: a level's interval over blocks, a gap across two engines, a shape's ratio and status."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from PIL import Image
from scipy import stats

from engine_fixtures.errors import ConfigError, MeasurementError
from engine_fixtures.judge.levels import FigureResult, block_means, figure_rows, gap, level, ratio_row
from engine_fixtures.report.seed import draw, overall, write_pngs
from engine_fixtures.scenarios.engine import EngineScenario
from engine_fixtures.scenarios.figures import Point, SeedFigure, Shape, measure_figure
from engine_fixtures.scenarios.group import Arm, Group


def test_a_level_is_the_mean_of_block_means_with_a_t_interval_over_blocks() -> None:
    windows = [(0, {"x": 1.0}), (0, {"x": 3.0}), (1, {"x": 4.0}), (2, {"x": 6.0}), (2, {"y": 9.0})]
    assert block_means(windows, "x") == [2.0, 4.0, 6.0]
    lv = level("s", 1, block_means(windows, "x"), "x")
    assert (lv.value, lv.blocks, lv.df) == (4.0, 3, 2.0)
    half = stats.t.ppf(0.975, 2) * 2.0 / math.sqrt(3)
    assert lv.interval == pytest.approx((4.0 - half, 4.0 + half))
    with pytest.raises(MeasurementError, match="no measured window"):
        level("s", 1, [], "the point")


def test_a_gap_adds_the_variances_and_says_two_engines() -> None:
    a, b = level("a", 1, [10.0, 12.0, 14.0], "a"), level("b", 1, [4.0, 5.0, 6.0], "b")
    g = gap(a, b)
    assert g.value == pytest.approx(7.0)
    assert g.se == pytest.approx(math.hypot(a.se, b.se))
    assert g.engines == 2
    assert 2.0 < g.df < 4.0


def test_a_shape_is_reproduced_only_when_its_whole_interval_is_on_the_seeds_side() -> None:
    fast, slow = level("f", 16, [25.0, 26.0, 27.0], "f"), level("s", 16, [8.0, 8.5, 9.0], "s")
    assert ratio_row("f/s", fast, slow, 1.5, ">=", 2).status == "reproduced"
    assert ratio_row("f/s", fast, slow, 1.5, "<=", 2).status == "not reproduced"
    near = level("n", 16, [7.0, 9.0, 11.0], "n")
    assert ratio_row("n/s", near, slow, 1.1, ">=", 1).status == "undecided"
    assert ratio_row("s/0", slow, level("z", 1, [0.0, 0.0], "z"), 1.0, ">=", 1).status == "undecided"


def test_a_figure_measured_from_live_arms_reads_as_rows_and_draws(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cpu = Group("cpu", EngineScenario("cpu", transport="cpu"), arms=(Arm("c16"), Arm("c4", concurrency=4)))
    ipc = Group("ipc", EngineScenario("ipc", transport="cuda_ipc"), arms=(Arm("c16"), Arm("c4", concurrency=4)))
    data = {("cpu", "c16"): [8.6, 8.7, 8.8], ("cpu", "c4"): [6.4, 6.5, 6.6], ("ipc", "c16"): [25.0, 26.0, 25.5],
            ("ipc", "c4"): [11.0, 11.2, 10.9]}
    fig = SeedFigure("t", "throughput", "requests_per_s",
                     (Point("cpu", 4, cpu, "c4", 6.5), Point("cpu", 16, cpu, "c16", 8.7),
                      Point("ipc", 4, ipc, "c4", 11.1), Point("ipc", 16, ipc, "c16", 25.7)),
                     (Shape("ipc scales", ("ipc", 16), ("ipc", 4), 1.5),
                      Shape("cpu does not", ("cpu", 16), ("cpu", 4), 1.5, "<="),
                      Shape("ipc beats cpu", ("ipc", 16), ("cpu", 16), 1.5)))
    result = measure_figure(fig, lambda g, arm: [(b, {"requests_per_s": v})
                                                for b, v in enumerate(data[(g.id, arm)])])
    assert [s.status for s in result.shapes] == ["reproduced", "reproduced", "reproduced"]
    assert [s.engines for s in result.shapes] == [1, 1, 2]
    assert overall(result) == "reproduced"
    rows = figure_rows(result)
    assert all(r.status == "report-only" and not r.gating for r in rows)
    assert "seed 8.7" in rows[1].message
    assert "over 3 blocks" in rows[1].message
    assert "instance offset" in rows[-1].message  # across two engines, said
    assert draw(result).axes
    written = write_pngs([result, result], tmp_path)
    assert [p.name for p in written] == ["seed-t.png", "seed-t.png", "seed-figures.png"]
    with Image.open(tmp_path / "seed-figures.png") as sheet, Image.open(tmp_path / "seed-t.png") as one:
        assert sheet.width == 2 * one.width
    empty = FigureResult("e", "e", "ipc_opens_per_image", "", "bars", "x", "", result.levels, ())
    assert overall(empty) == "measured"
    unseeded = tuple(replace(lv, seed=None) for lv in result.levels)  # the IPC opens: the seed gave no number
    # bars with no seed have nothing to label: no legend, and no warning (warnings are errors in this suite)
    assert draw(replace(empty, levels=unseeded)).axes[0].get_legend() is None
    late = (replace(result.levels[0], seed=None), *result.levels[1:])  # the first bar unseeded: the rest labelled
    assert draw(replace(empty, levels=late)).axes[0].get_legend() is not None
    with pytest.raises(ConfigError, match="not declared"):
        SeedFigure("t", "t", "requests_per_s", (Point("cpu", 4, cpu, "c4"),),
                   (Shape("x", ("cpu", 16), ("cpu", 4), 1.5),))
    with pytest.raises(ConfigError, match="no arm"):
        Point("cpu", 1, cpu, "c1")

"""The seed matrix runs in launch order: each of its two launches starts once in a session of the nightly, of the
smoke subset and of the weekly figures.

The factory keeps one engine live, so a test on the cpu launch after one on the cuda_ipc launch would start the cpu
engine again (a minute or more of the nightly's time on the 4B shape). A group is measured once per session, when a
test first asks for it; collected in pytest's own order, the launches of those first measurements must form one run
per launch.
"""

from __future__ import annotations

from itertools import groupby
from pathlib import Path

import pytest

from perf_tests.sglang.gpu_tier import seed_matrix as m

pytest_plugins = ["pytester"]

MATRIX = Path(m.__file__).with_name("test_seed_matrix.py")
FIGURES = Path(m.__file__).with_name("test_seed_figures.py")
FIXED = {"test_cpu_transport_contrast": (m.CPU,), "test_cuda_ipc_contrast": (m.IPC,),
         "test_stock_ipc_caches_pool_handles": (m.IPC,), "test_tp1_admits_the_concurrency": (m.IPC,),
         "test_smoke_stock_ipc_caches_pool_handles": (m.SMOKE_IPC,)}


def _groups(item: pytest.Item) -> tuple:
    params = getattr(item, "callspec", None)
    params = params.params if params is not None else {}
    if "figure" in params:
        return tuple(params["figure"].groups())
    if "group" in params:
        return (params["group"],)
    return FIXED[item.originalname]  # type: ignore[attr-defined]


@pytest.mark.parametrize(("path", "smoke"), [(MATRIX, False), (MATRIX, True), (FIGURES, False)],
                         ids=["nightly", "smoke", "weekly-figures"])
def test_each_launch_starts_once(pytester: pytest.Pytester, path: Path, smoke: bool) -> None:
    items = [i for i in pytester.getitems(path.read_text()) if (i.get_closest_marker("smoke") is not None) == smoke]
    first = list(dict.fromkeys(g for item in items for g in _groups(item)))  # each group when it is measured
    launches = [g.engine.id for g in first]
    runs = [k for k, _ in groupby(launches)]
    assert items
    assert len(runs) == len(set(runs)), f"launches in test order: {runs}"

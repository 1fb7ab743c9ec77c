"""Make SGLang find the plugin without ``pip install``: write a ``*.dist-info`` with the entry point.

For offline runs (the H200 recipe unpacks wheels into a PYTHONPATH folder): ``python -m
engine_fixtures.sglang_plugin.distinfo DIR`` writes ``DIR/perf_arms_plugin-0.1.0.dist-info/`` declaring
``[sglang.srt.plugins] perf_arms = engine_fixtures.sglang_plugin:load``. Put DIR and the repository root
on the engine's PYTHONPATH. ``plugin_visible()`` tells whether an interpreter would find the entry point.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

GROUP = "sglang.srt.plugins"
NAME = "perf_arms"
TARGET = "engine_fixtures.sglang_plugin:load"
DIST = "perf_arms_plugin-0.1.0.dist-info"


def write_dist_info(directory: Path) -> Path:
    """Create (idempotently) the dist-info folder in ``directory``; returns its path."""
    dist = Path(directory) / DIST
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: perf-arms-plugin\nVersion: 0.1.0\n")
    (dist / "entry_points.txt").write_text(f"[{GROUP}]\n{NAME} = {TARGET}\n")
    (dist / "top_level.txt").write_text("engine_fixtures\n")
    return dist


def plugin_visible(python: str, env: dict[str, str], timeout_s: float = 60.0) -> bool:
    """True if ``python`` with ``env`` lists our entry point in the ``sglang.srt.plugins`` group."""
    code = (
        "import importlib.metadata as m, sys; "
        f"sys.exit(0 if any(e.value == {TARGET!r} for e in m.entry_points(group={GROUP!r})) else 1)"
    )
    try:
        return (
            subprocess.run(
                [python, "-c", code], env=env, timeout=timeout_s, capture_output=True, check=False
            ).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return False


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("directory", type=Path, help="a folder that will be on the engine's PYTHONPATH")
    a = p.parse_args(argv)
    print(write_dist_info(a.directory))
    return 0


if __name__ == "__main__":
    sys.exit(main())

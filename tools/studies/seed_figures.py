"""Draw the seed's figures again from results JSONs: one sheet of every figure whose groups the runs measured.

    python -m tools.studies.seed_figures OUT_DIR RESULTS.json [RESULTS.json ...]

A runner whose per-call time limit splits the matrix into parts (``K=...`` in ``gpu_tier.sh``) gets each part's
figures in that part's report; this puts them on one sheet (``OUT_DIR/seed-figures.png``, one PNG per figure
beside it) and prints each figure's rows. The levels are recomputed from the windows the results keep (each
window's block and the windows of each metric, ``RunResult.block_windows``), with the same
``measure_figure`` the session used; a group measured in two of the given runs is refused (say which run to take).
Nothing is measured here.
"""

from __future__ import annotations

import sys
from pathlib import Path

from engine_fixtures.judge.levels import figure_rows
from engine_fixtures.report.seed import overall, write_pngs
from engine_fixtures.scenarios.figures import measure_figure
from engine_fixtures.store.results import ResultsFile
from perf_tests.sglang.gpu_tier.seed_matrix import FIGURES

Windows = list[tuple[int, dict[str, float]]]


def windows_by_arm(paths: list[Path]) -> dict[tuple[str, str], Windows]:
    """Each live arm's windows as the session held them, ``(block, {metric: value})``, from its stored result."""
    out: dict[tuple[str, str], Windows] = {}
    source: dict[str, Path] = {}
    for path in paths:
        for r in ResultsFile.load(path).results:
            group, arm = r.metadata.get("live_group"), r.metadata.get("live_arm")
            if group is None:
                continue
            if source.setdefault(group, path) != path:
                raise SystemExit(f"live group {group} was measured in {source[group]} and {path}: give one of them")
            out[(group, arm)] = r.block_windows()
    return out


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__)
        return 2
    out_dir, paths = Path(argv[0]), [Path(p) for p in argv[1:]]
    windows = windows_by_arm(paths)
    results = []
    for fig in FIGURES:
        wanted = [(p.group.id, p.arm) for p in fig.points] + [(g.id, a) for p in fig.points if p.minus
                                                               for g, a in (p.minus,)]
        missing = list(dict.fromkeys(f"{g}/{a}" for g, a in wanted if (g, a) not in windows))
        if missing:  # e.g. runs of an older declaration, whose groups had other arms
            print(f"{fig.id}: not drawn, arm(s) {', '.join(missing)} not in these runs")
            continue
        result = measure_figure(fig, lambda g, arm: windows[(g.id, arm)])
        results.append(result)
        print(f"{fig.id}: {overall(result)}")
        for row in figure_rows(result):
            print(f"  {row.message}")
    out_dir.mkdir(parents=True, exist_ok=True)
    for p in write_pngs(results, out_dir):
        print(f"wrote {p}")
    return 0 if results else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Real py-spy against a real SGLang-titled process tree: the A/B differential names the injected function.

The candidate tree's scheduler spins 4 ms per request in ``inject.spin`` (the known slowdown); the reference tree
does not. Both are profiled by role (found by process title) over a 2 s window each, so the test takes seconds.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from engine_fixtures.profile import render
from engine_fixtures.profile.engine import ProfileSettings, ab_differential, engine_roles, profile_engine
from engine_fixtures.profile.figure import figure
from engine_fixtures.profile.report import ProfileBook
from perf_tests.support import REPO_ROOT

SPIN_MS = 4.0


def test_ab_differential_names_the_injected_spin_in_the_scheduler(work_tree, tmp_path: Path) -> None:
    ps = ProfileSettings("always", rate_hz=100.0, seconds=2.0, workdir=tmp_path)
    ref_tree, cand_tree = work_tree(0.0), work_tree(SPIN_MS)
    roles = engine_roles(cand_tree.pid)
    assert set(roles) == {"http_server", "scheduler", "detokenizer"}, roles
    cand = profile_engine(roles, cand_tree.drive_load, ps, label="candidate")
    ref = profile_engine(engine_roles(ref_tree.pid), ref_tree.drive_load, ps, label="reference")
    assert cand.notes == (), cand.notes
    assert ref.notes == (), ref.notes

    sched = cand.profiles["scheduler"]
    assert sched.requests > 50, sched.requests
    assert sched.samples > 50, sched.samples
    diffs = {d.role: d for d in ab_differential(cand, ref)}
    top = diffs["scheduler"].growers(1)[0]
    assert (top.frame.function, Path(top.frame.file).name) == ("spin", "inject.py"), render.top_text(diffs.values())
    assert top.caller is not None
    assert top.caller.function == "schedule_batch"
    assert top.significant, render.top_text(diffs.values())
    assert top.share > 0.5, render.top_text(diffs.values())
    # 4 ms of spin per request is ~4 ms of Python CPU per request, within sampling and scheduling error
    assert 0.002 < top.change_s < 0.008, top.change_s
    # no function of another role grew like the injected one, so the spin is what the differential names first. A
    # role's net total is no measure of that: a spinning scheduler polls its pipe less, and the detokenizer's cost per
    # request follows the batches it is sent, so on a busy 2-core box either total moved by 1-3 ms/request (two CI
    # runs: the scheduler's net -0.98 with its spin at the top, the detokenizer's -2.56 and +1.29)
    others = [g for role, d in diffs.items() if role != "scheduler" for g in d.growers(1)]
    assert all(g.change_s < 0.5 * top.change_s for g in others), render.top_text(diffs.values())

    book = ProfileBook()
    book.add(["scn"], "candidate minus reference", list(diffs.values()), ())
    text = book.failure_text(["scn"])
    sched_at = next(i for i, ln in enumerate(text.splitlines()) if ln.startswith("scheduler: "))
    assert text.splitlines()[sched_at + 1].startswith("  1. spin (engine_fixtures/inject.py:"), text
    md = "\n".join(book.markdown())
    assert "| 1 | `spin` |" in md, md
    fig = figure(list(diffs.values()), "tree A/B")
    assert fig is not None
    fig.savefig(tmp_path / "icicle.png")
    assert (tmp_path / "icicle.png").stat().st_size > 10_000


def _build_at(root: Path) -> Path:
    """The suite's code (the work tree's roles, the injected spin) copied to ``root``: a build installed elsewhere."""
    for package in ("engine_fixtures", "perf_tests"):
        shutil.copytree(REPO_ROOT / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def test_two_builds_at_different_paths_compare_the_same_functions(work_tree, tmp_path: Path) -> None:
    """The reference build at one path, the candidate (the same code plus a 4 ms spin per request) at another, as an
    A/B's two builds always are: the differential names the spin first and no unchanged function as new."""
    ps = ProfileSettings("always", rate_hz=100.0, seconds=2.0, workdir=tmp_path / "profiles")
    ref_tree = work_tree(0.0, _build_at(tmp_path / "reference-build"))
    cand_tree = work_tree(SPIN_MS, _build_at(tmp_path / "candidate-venv" / "site"))
    cand = profile_engine(engine_roles(cand_tree.pid), cand_tree.drive_load, ps, label="candidate")
    ref = profile_engine(engine_roles(ref_tree.pid), ref_tree.drive_load, ps, label="reference")
    sched = {d.role: d for d in ab_differential(cand, ref)}["scheduler"]
    for side, where in ((cand, "candidate-venv/site"), (ref, "reference-build")):  # sampled at two paths
        files = {f.file for stack in side.profiles["scheduler"].stacks for f in stack
                 if "perf_tests/support/" in f.file or "engine_fixtures/" in f.file}
        assert files, where
        assert all(f.startswith(str(tmp_path / where)) for f in files), files
    top = sched.growers(1)[0]
    assert (top.frame.function, top.frame.short_file) == ("spin", "engine_fixtures/inject.py"), render.top_text([sched])
    # keyed by absolute path every function of the candidate would be new; by module path only the spin may be
    # (the reference tree calls it with 0 ms, so a sample may land in it there too)
    new = [f for f in sched.functions if f.reference_total_s == 0 and f.significant and f.change_s > 0]
    assert all(f.frame.function == "spin" for f in new), render.top_text([sched])
    both = [f for f in sched.functions if f.reference_total_s > 0 and f.candidate_total_s > 0]
    assert any(f.frame.function == "schedule_batch" for f in both), [f.frame.key for f in sched.functions]

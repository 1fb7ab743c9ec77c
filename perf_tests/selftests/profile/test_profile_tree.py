"""Real py-spy against a real SGLang-titled process tree: the A/B differential names the injected function.

The candidate tree's scheduler spins 4 ms per request in ``inject.spin`` (the known slowdown); the reference tree
does not. Both are profiled by role (found by process title) over a 2 s window each, so the test takes seconds.
"""

from __future__ import annotations

from pathlib import Path

from engine_fixtures.profile import render
from engine_fixtures.profile.engine import ProfileSettings, ab_differential, engine_roles, profile_engine
from engine_fixtures.profile.figure import figure
from engine_fixtures.profile.report import ProfileBook

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
    # the detokenizer did not change much: its change is a small fraction of the scheduler's
    assert abs(diffs["detokenizer"].change_s) < 0.5 * diffs["scheduler"].change_s

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

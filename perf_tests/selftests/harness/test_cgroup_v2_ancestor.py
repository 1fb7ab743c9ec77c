"""Where a v2 sandbox goes (fake v2 trees): inside this process's own cgroup, never above it unless told so.

The H200 layout: the root delegates cpu, ``/process_api`` does not, and the command runs in the leaf
``/process_api/<id>``. The sandbox used to go to the root, outside the leaf's memory limit and kill.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from engine_fixtures.errors import QuotaNotPermitted
from engine_fixtures.isolation import cgroup_v2
from engine_fixtures.isolation.cgroups import CpuQuota, V2Backend, configure_parent, configured_parent
from engine_fixtures.isolation.signals import sigkill_and_wait

pytest_plugins = ("pytester",)


def _cg(path: Path, controllers: str, subtree: str, procs: tuple[int, ...] = ()) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "cgroup.controllers").write_text(controllers + "\n")
    (path / "cgroup.subtree_control").write_text(subtree + "\n")
    (path / "cgroup.procs").write_text("".join(f"{p}\n" for p in procs))
    return path


def _lineage() -> tuple[int, ...]:
    me = psutil.Process()
    return (me.pid, me.ppid())


@pytest.fixture
def foreign_pid() -> Iterator[int]:
    """A process that is neither this one, nor an ancestor, nor a descendant (re-parented away)."""
    out = subprocess.run(["sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True,
                         check=True, timeout=30)
    pid = int(out.stdout)
    yield pid
    sigkill_and_wait([pid], 10)


def test_h200_layout_refuses_and_names_the_option_that_accepts_the_root(tmp_path: Path) -> None:
    top = _cg(tmp_path, "cpuset cpu io memory", "cpuset cpu io memory")
    mid = _cg(top / "process_api", "cpuset io memory", "io memory")
    leaf = _cg(mid / "61c3042a", "io memory", "", _lineage())
    with pytest.raises(QuotaNotPermitted) as info:
        cgroup_v2.plan(leaf, top)
    text = str(info.value)
    assert f"{leaf} has no cpu controller" in text
    assert f"--perf-cgroup-parent {top}" in text  # the explicit acceptance, with what it costs
    assert "escape its limits and its kill" in text
    assert "--perf-cpu-quota none" in text


def test_explicit_parent_is_used_as_given(tmp_path: Path) -> None:
    top = _cg(tmp_path, "cpu io memory", "cpu io memory")
    leaf = _cg(top / "process_api" / "61c3042a", "io memory", "", _lineage())
    assert cgroup_v2.plan(leaf, top, explicit=top).parent == top
    previous = configured_parent()
    configure_parent(top)
    try:
        with CpuQuota(0.5, name="explicit") as q:  # the option's path reaches every sandbox of this process
            assert (q.version, q.path.parent) == (2, top)
            assert (q.path / "cpu.max").read_text() == "50000 100000"
            for f in q.path.iterdir():
                f.unlink()
    finally:
        configure_parent(previous)


def test_delegated_leaf_moves_this_runs_processes_into_a_runner_leaf(tmp_path: Path) -> None:
    top = _cg(tmp_path, "cpu io memory", "cpu io memory")
    job = _cg(top / "job", "cpu io memory", "", _lineage())  # cpu handed to us, and we live here
    plan = cgroup_v2.plan(job, top)
    assert (plan.parent, set(plan.move)) == (job, set(_lineage()))
    cgroup_v2.apply(plan)
    runner = job / cgroup_v2.RUNNER_LEAF
    assert runner.is_dir()
    assert (runner / "cgroup.procs").read_text() == str(plan.move[-1])  # a fake file keeps the last write
    backend = V2Backend(plan.parent, "perf-x-1.1234567890-abcdef")
    (job / "cgroup.procs").write_text("")  # the kernel would have emptied it
    backend.create(1.5)
    assert (job / "cgroup.subtree_control").read_text() == "+cpu"
    assert (backend.paths[0] / "cpu.max").read_text() == "150000 100000"


def test_a_later_session_in_the_runner_leaf_puts_sandboxes_next_to_it(tmp_path: Path) -> None:
    top = _cg(tmp_path, "cpu io", "cpu io")
    job = _cg(top / "job", "cpu io", "cpu")
    runner = _cg(job / cgroup_v2.RUNNER_LEAF, "cpu", "", _lineage())
    assert cgroup_v2.plan(runner, top) == cgroup_v2.V2Plan(job, reason=cgroup_v2.plan(runner, top).reason)


def test_foreign_process_in_our_cgroup_is_a_refusal_with_the_recipe(tmp_path: Path, foreign_pid: int) -> None:
    top = _cg(tmp_path, "cpu io", "cpu io")
    svc = _cg(top / "svc", "cpu io", "cpu")
    leaf = _cg(svc / "leaf", "cpu io", "", (*_lineage(), foreign_pid))
    with pytest.raises(QuotaNotPermitted, match=rf"not this run's \(\[{foreign_pid}\]\)") as info:
        cgroup_v2.plan(leaf, top)
    assert f"echo $p > {leaf}/{cgroup_v2.RUNNER_LEAF}/cgroup.procs" in str(info.value)
    assert f"--perf-cgroup-parent {svc}" in str(info.value)  # the sibling it used to pick, only if accepted
    assert not (leaf / cgroup_v2.RUNNER_LEAF).exists()  # planning writes nothing


def test_root_and_a_cgroup_that_already_hands_cpu_down(tmp_path: Path) -> None:
    top = _cg(tmp_path, "cpu memory", "memory")
    assert cgroup_v2.plan(top, top).parent == top  # the root may hold processes and children
    mine = _cg(top / "mine", "cpu memory", "cpu")
    assert cgroup_v2.plan(mine, top).parent == mine
    bare = _cg(tmp_path / "bare", "memory", "")
    with pytest.raises(QuotaNotPermitted, match="no cpu controller"):
        cgroup_v2.plan(bare, bare)


def test_no_delegating_ancestor_means_no_option_to_suggest(tmp_path: Path) -> None:
    top = _cg(tmp_path, "io memory", "io memory")
    _cg(top / "a", "io", "io")
    leaf = _cg(top / "a" / "b", "io", "", (os.getpid(),))
    with pytest.raises(QuotaNotPermitted) as info:
        cgroup_v2.plan(leaf, top)
    assert "--perf-cgroup-parent" not in str(info.value)
    assert "echo +cpu >" in str(info.value)


def test_option_points_every_sandbox_of_the_run_at_the_parent(pytester: pytest.Pytester, tmp_path: Path) -> None:
    top = _cg(tmp_path / "fake-root", "cpu io memory", "cpu io memory")
    pytester.makepyfile(f"""
        from pathlib import Path
        from engine_fixtures.isolation.cgroups import CpuQuota

        def test_sandbox_lands_under_the_option(perf_settings):
            assert perf_settings.cgroup_parent == Path({str(top)!r})
            q = CpuQuota(None, name="opt")
            assert q.path.parent == Path({str(top)!r})
        """)
    pytester.runpytest("--perf-cgroup-parent", str(top)).assert_outcomes(passed=1)
    assert configured_parent() is None  # restored after the in-process session

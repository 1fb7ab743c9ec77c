"""Where a v2 sandbox goes when our own cgroup's parent does not delegate cpu (the H200 container layout)."""

from __future__ import annotations

from pathlib import Path

from engine_fixtures.isolation.cgroups import v2_sandbox_parent


def _cg(path: Path, controllers: str, subtree: str) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "cgroup.controllers").write_text(controllers + "\n")
    (path / "cgroup.subtree_control").write_text(subtree + "\n")
    (path / "cgroup.procs").write_text("")
    return path


def test_falls_back_to_the_nearest_ancestor_that_delegates_cpu(tmp_path: Path) -> None:
    # /sys/fs/cgroup (cpu delegated) > process_api (cpu not delegated) > <id> (us)
    top = _cg(tmp_path, "cpuset cpu io memory", "cpuset cpu io memory")
    mid = _cg(top / "process_api", "cpuset io memory", "io memory")
    leaf = _cg(mid / "61c3042a", "io memory", "")
    assert v2_sandbox_parent(leaf, top) == top


def test_prefers_our_own_parent_when_it_delegates_cpu(tmp_path: Path) -> None:
    top = _cg(tmp_path, "cpu io", "cpu io")
    leaf = _cg(top / "job", "cpu io", "")
    assert v2_sandbox_parent(leaf, top) == top  # the parent of `job` is top here: a sibling of ours
    deeper = _cg(leaf / "step", "cpu", "")
    (leaf / "cgroup.subtree_control").write_text("cpu\n")
    assert v2_sandbox_parent(deeper, top) == leaf


def test_none_when_no_ancestor_delegates_cpu(tmp_path: Path) -> None:
    top = _cg(tmp_path, "io memory", "io memory")
    leaf = _cg(top / "a" / "b", "io", "")
    _cg(top / "a", "io", "io")
    assert v2_sandbox_parent(leaf, top) is None

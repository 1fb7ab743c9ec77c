"""Per-role pinning: whole physical cores per role (SMT siblings never split between roles), set on every thread."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine_fixtures.engine.spec import EngineSpec
from engine_fixtures.errors import ConfigError
from engine_fixtures.isolation.pinning import (
    RolePlacement,
    physical_cores,
    pin_roles,
    role_placement,
    stage_split,
)


def fake_topology(root: Path, cores: dict[int, int]) -> Path:
    """A sysfs-like tree: CPU -> core id, one package."""
    for cpu, core in cores.items():
        d = root / f"cpu{cpu}" / "topology"
        d.mkdir(parents=True)
        (d / "physical_package_id").write_text("0\n")
        (d / "core_id").write_text(f"{core}\n")
    return root


def test_siblings_form_one_core_and_each_role_gets_whole_cores(tmp_path: Path) -> None:
    # 8 physical cores with SMT siblings n and n+8 (the usual Linux numbering), the engine on CPUs 0-5 and 8-13
    topo = fake_topology(tmp_path, {c: c % 8 for c in range(16)})
    engine = (*range(6), *range(8, 14))
    assert physical_cores(engine, topo) == [(0, 8), (1, 9), (2, 10), (3, 11), (4, 12), (5, 13)]
    placed = role_placement(engine, topology=topo)
    assert placed.cpus_of("scheduler") == (0, 8, 1, 9)
    assert placed.cpus_of("http_server") == (2, 10, 3, 11)
    assert placed.cpus_of("detokenizer") == (4, 12)
    assert placed.cpus_of("resource_tracker") == placed.rest == (5, 13)
    groups = (*placed.roles, ("others", placed.rest))
    owner_of_core: dict[int, set[str]] = {}
    for role, cpus in groups:
        for c in cpus:
            owner_of_core.setdefault(c % 8, set()).add(role)
    assert all(len(roles) == 1 for roles in owner_of_core.values())  # no core shared by two roles
    assert sorted(c for _r, cpus in groups for c in cpus) == sorted(engine)  # every engine CPU placed once
    assert "scheduler on CPUs 0-1,8-9" in placed.describe()


def test_too_few_cores_is_a_config_error_naming_the_fix(tmp_path: Path) -> None:
    topo = fake_topology(tmp_path, {c: c for c in range(5)})
    with pytest.raises(ConfigError, match=r"needs 6 physical cores.*--perf-role-cpus off"):
        role_placement(range(5), topology=topo)


def test_unreadable_topology_counts_each_cpu_as_a_core(tmp_path: Path) -> None:
    assert physical_cores((3, 1, 2), tmp_path) == [(1,), (2,), (3,)]


def test_a_spec_refuses_roles_placed_outside_its_cpus(tmp_path: Path) -> None:
    placed = RolePlacement((("scheduler", (0,)),), (1,))
    EngineSpec(tmp_path, cpus=(0, 1), role_cpus=placed)
    with pytest.raises(ConfigError, match="outside the engine's CPUs"):
        EngineSpec(tmp_path, cpus=(0,), role_cpus=placed)
    with pytest.raises(ConfigError, match="outside the engine's CPUs"):
        EngineSpec(tmp_path, role_cpus=placed)
    assert EngineSpec(tmp_path, cpus=(0, 1), role_cpus=placed).key != EngineSpec(tmp_path, cpus=(0, 1)).key
    assert EngineSpec(tmp_path, cpus=(0, 1), role_cpus=placed).arm["role_cpus"] == "on"  # its pools are its own
    assert "role_cpus" not in EngineSpec(tmp_path, cpus=(0, 1)).arm  # unpinned arms keep the keys they had


def test_every_thread_of_a_role_is_pinned_and_a_vanished_pid_is_skipped() -> None:
    """A real child with four threads started before the pin: each thread, not only the main one, moves."""
    mine = sorted(os.sched_getaffinity(0))
    target = (mine[-1],)
    code = ("import threading, sys; ev = threading.Event(); "
            "[threading.Thread(target=ev.wait, daemon=True).start() for _ in range(3)]; "
            "print('up', flush=True); sys.stdin.read()")
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == b"up\n"
        gone = 2**22 + 7  # above pid_max's default: no such process
        done = pin_roles({"scheduler": [child.pid, gone]}, RolePlacement((("scheduler", target),), tuple(mine)))
        assert done == {"scheduler": target}
        tids = os.listdir(f"/proc/{child.pid}/task")
        assert len(tids) == 4
        assert all(os.sched_getaffinity(int(t)) == set(target) for t in tids)
    finally:
        child.communicate(b"", timeout=30)


def test_the_stage_keeps_the_last_two_cores_for_the_idle_members(tmp_path: Path) -> None:
    # a 16-vCPU runner without SMT: engines on 0-11 (the client on 12-15); the measured engine on 0-9, idle ones 10-11
    topo = fake_topology(tmp_path, {c: c for c in range(16)})
    stage = stage_split(range(12), topology=topo)
    assert (stage.stage, stage.wings) == (tuple(range(10)), (10, 11))
    assert stage.placement(True).cpus_of("scheduler") == tuple(range(10))  # the whole tree on the stage
    assert stage.placement(False).cpus_of("scheduler") == (10, 11)
    assert stage.placement(False).cpus_of("http_server") == (10, 11)
    assert "measured engine on CPUs 0-9" in stage.describe()
    assert "parked on CPUs 10-11" in stage.describe()
    # with per-role pinning, the roles get whole cores of the stage, never of the wings
    roles = stage_split(range(12), roles=True, topology=topo).placement(True)
    assert roles.cpus_of("scheduler") == (0, 1)
    assert set(roles.rest) == set(range(5, 10))


def test_the_stage_keeps_smt_siblings_together_and_refuses_a_small_set(tmp_path: Path) -> None:
    topo = fake_topology(tmp_path, {c: c % 8 for c in range(16)})
    stage = stage_split((*range(8), *range(8, 16)), topology=topo)
    assert stage.wings == (6, 14, 7, 15)  # two whole physical cores
    with pytest.raises(ConfigError, match=r"stage needs 6 physical cores.*--perf-ab-stage off"):
        stage_split(range(5), topology=fake_topology(tmp_path / "small", {c: c for c in range(5)}))

"""EngineFactory: reuse by key, one live engine at a time, cgroup sandbox, leak check after every stop."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from engine_fixtures.engine.factory import EngineFactory, cgroup_prefix
from engine_fixtures.engine.spec import EngineSpec
from engine_fixtures.isolation.cgroups import probe_quota_support
from engine_fixtures.isolation.leaks import LeakSnapshot
from engine_fixtures.model.modeldir import write_model_dir

STUB = ("-m", "engine_fixtures.testing.stub_engine")


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model_dir(tmp_path_factory.mktemp("m") / "qwen-tiny", "tiny")


def test_reuse_by_key_and_replace_when_another_spec_is_asked(model: Path, tmp_path: Path) -> None:
    a = EngineSpec(model, launcher=STUB, name="stub", proof=False, copy="torch")
    before = LeakSnapshot.take(cgroup_prefix(a))
    f = EngineFactory(tmp_path, deadline_s=60.0)
    try:
        b = a.with_(copy="buffer")
        h1 = f.get(a)
        assert f.get(a) is h1  # same key: reused, not restarted
        h2 = f.get(b)  # another key: the first engine is stopped first (max_live=1)
        assert h2 is not h1
        assert not psutil.pid_exists(h1.pid) or psutil.Process(h1.pid).status() == psutil.STATUS_ZOMBIE
        assert f.live() == (h2,)
    finally:
        f.close()
    assert f.live() == ()
    before.assert_no_new(LeakSnapshot.take(cgroup_prefix(a)))


@pytest.mark.skipif(probe_quota_support() is not None, reason=str(probe_quota_support()))
def test_engine_tree_runs_inside_its_cpu_quota_and_the_cgroup_is_removed(model: Path, tmp_path: Path) -> None:
    f = EngineFactory(tmp_path, deadline_s=60.0)
    try:
        h = f.get(EngineSpec(model, launcher=STUB, name="stub", proof=False, cpu_quota=1.5))
        assert h.quota is not None
        inside = set(h.quota.pids())
        tree = {p for pids in h.pids().values() for p in pids}
        assert tree <= inside
        cgroup = h.quota.path
        assert cgroup.exists()
    finally:
        f.close()
    assert not cgroup.exists()

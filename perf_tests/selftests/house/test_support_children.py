"""The self-test stand-ins live in ``perf_tests.support``, outside the wheel (test_wheel.py), and ``perf_tests`` is
never installed; yet the children that run them must import them from any working directory: a child started with
``support.child_env()``, and an engine (the stub engine, and the copy and scheduler modules its plugin imports by
name), whose PYTHONPATH the engine fixture gives the repository root."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from engine_fixtures.engine.handle import engine_env
from engine_fixtures.engine.spec import EngineSpec
from perf_tests import support
from perf_tests.support import REPO_ROOT, child_env, launcher

WHERE = "import perf_tests.support.stub_copy as m, perf_tests.support.stub_scheduler; print(m.__file__)"


def test_launcher_runs_a_support_module() -> None:
    assert launcher("stub_engine", "--stub-token-ms", "2") == ("-m", "perf_tests.support.stub_engine",
                                                              "--stub-token-ms", "2")
    assert Path(support.__file__).parent == REPO_ROOT / "perf_tests" / "support"


def test_a_child_with_child_env_imports_the_support_modules_of_this_checkout(tmp_path: Path) -> None:
    """From a foreign working directory and with no PYTHONPATH of its own, the child finds this checkout's modules."""
    bare = {"PATH": os.environ.get("PATH", "")}
    env = child_env(bare)
    assert env["PYTHONPATH"] == str(REPO_ROOT)
    assert child_env({**bare, "PYTHONPATH": "/elsewhere"})["PYTHONPATH"] == os.pathsep.join((str(REPO_ROOT),
                                                                                               "/elsewhere"))
    done = subprocess.run([sys.executable, "-c", WHERE], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert Path(done.stdout.strip()) == REPO_ROOT / "perf_tests" / "support" / "stub_copy.py"


def test_an_engine_child_has_the_repository_root_on_its_pythonpath(tmp_path: Path) -> None:
    """The stub engine runs with its working directory in the engine's workdir: only PYTHONPATH brings it there."""
    spec = EngineSpec(tmp_path / "model", launcher=launcher("stub_engine"), name="stub", proof=False)
    env = engine_env(spec, tmp_path, None)
    assert str(REPO_ROOT) in env["PYTHONPATH"].split(os.pathsep)
    done = subprocess.run([sys.executable, "-c", WHERE], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]

"""Fixtures of the profiler's self-tests: a working, SGLang-titled process tree driven through stdin."""

from __future__ import annotations

import os
import select
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path

import pytest

from engine_fixtures.isolation.roles import wait_for_roles
from perf_tests.support import child_env, launcher

READY_DEADLINE_S = 120.0
STOP_DEADLINE_S = 30.0


class Tree:
    """A running ``support.work_tree``: its root pid and its ``drive_load(seconds) -> requests completed``."""

    def __init__(self, spin_ms: float, root: Path | None = None) -> None:
        env = child_env()
        if root is not None:  # another build: the same code at another path, first on the import path
            env["PYTHONPATH"] = os.pathsep.join((str(root), env["PYTHONPATH"]))
        self.proc = subprocess.Popen([sys.executable, *launcher("work_tree", "--spin-ms", str(spin_ms))],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                                     cwd=root)  # ``-m`` puts the working directory first on the import path
        assert self.readline(READY_DEADLINE_S) == "ready", "work tree did not start"
        wait_for_roles(self.proc.pid, ["scheduler", "detokenizer"], READY_DEADLINE_S)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def readline(self, deadline_s: float) -> str:
        ready, _, _ = select.select([self.proc.stdout], [], [], deadline_s)
        assert ready, f"work tree pid {self.pid} gave no answer within {deadline_s:g} s"
        return self.proc.stdout.readline().strip()  # type: ignore[union-attr]

    def drive_load(self, seconds: float) -> int:
        self.proc.stdin.write(f"{seconds}\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]
        return int(self.readline(seconds + 60.0))

    def stop(self) -> None:
        with suppress(OSError):
            self.proc.stdin.close()  # type: ignore[union-attr]
        try:
            self.proc.wait(timeout=STOP_DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=STOP_DEADLINE_S)
        self.proc.stdout.close()  # type: ignore[union-attr]


@pytest.fixture
def work_tree(leak_check) -> Iterator[Callable[[float], Tree]]:  # type: ignore[no-untyped-def]
    """``work_tree(spin_ms)`` starts a tree; every tree is stopped at teardown (and ``leak_check`` proves it)."""
    trees: list[Tree] = []

    def start(spin_ms: float = 0.0, root: Path | None = None) -> Tree:
        trees.append(Tree(spin_ms, root))
        return trees[-1]

    yield start
    for tree in trees:
        tree.stop()

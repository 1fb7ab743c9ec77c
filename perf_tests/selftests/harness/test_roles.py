"""roles.py: classification by title, discovery on a real SGLang-titled tree, waiting for roles."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from engine_fixtures.errors import ProcessCrashed, ProcessStartError
from engine_fixtures.isolation.process import LaunchSpec, Supervised
from engine_fixtures.isolation.roles import OTHER, SGLANG_ROLES, Role, classify, discover, title_prefix, wait_for_roles
from perf_tests import support

PROC_TREE = Path(support.__file__).with_name("proc_tree.py")
TITLES = ("sglang::scheduler_TP0", "sglang::scheduler_PP1_TP0", "sglang::detokenizer",
          "sglang::detokenizer_router", "sglang::tokenizer_worker:4242", "sglang::data_parallel_controller",
          "some-helper")


@pytest.mark.parametrize(("cmdline", "is_root", "role"), [
    ("python -m sglang.launch_server --model-path /m", True, "http_server"),
    ("sglang::scheduler", False, "scheduler"),
    ("sglang::scheduler_DP0_TP0", False, "scheduler"),
    ("sglang::detokenizer", False, "detokenizer"),
    ("sglang::detokenizer_router", False, "detokenizer_router"),
    ("sglang::tokenizer_worker:123", False, "tokenizer_worker"),
    ("sglang::data_parallel_controller", False, "data_parallel_controller"),
    ("python3 -c from multiprocessing.resource_tracker import main;main(7)", False, "resource_tracker"),
    ("python -m sglang.launch_server", False, OTHER),
    ("sglang::schedul", False, OTHER),  # a truncated name() must not count as a scheduler
])
def test_classify(cmdline: str, is_root: bool, role: str) -> None:
    assert classify(cmdline, is_root) == role


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Supervised]:
    """One SGLang-shaped tree shared by this module's read-only tests (start-up costs seconds)."""
    tmp_path = tmp_path_factory.mktemp("tree")
    ready = tmp_path / "ready"
    argv = [sys.executable, str(PROC_TREE), "--ready-file", str(ready)]
    for t in TITLES:
        argv += ["--title", t]
    with Supervised.start(LaunchSpec(argv=tuple(argv), log_path=tmp_path / "tree.log", name="tree")) as sup:
        sup.wait_ready(ready.exists, deadline_s=120)
        yield sup


def test_discover_sglang_titled_tree(tree: Supervised) -> None:
    found = discover(tree.pid)
    assert set(found) == {r.name for r in SGLANG_ROLES} | {OTHER}
    counts = {role: len(pids) for role, pids in found.items()}
    assert counts == {"http_server": 1, "scheduler": 2, "detokenizer": 1, "detokenizer_router": 1,
                      "tokenizer_worker": 1, "data_parallel_controller": 1, "resource_tracker": 1, OTHER: 1}
    assert found["http_server"] == (tree.pid,)
    every = [pid for pids in found.values() for pid in pids]
    children = psutil.Process(tree.pid).children(recursive=True)
    assert sorted(every) == sorted([tree.pid, *(c.pid for c in children)])
    for pid in found["scheduler"]:  # the kernel's comm is truncated; the cmdline is not
        assert Path(f"/proc/{pid}/comm").read_text().strip() == "sglang::schedul"


def test_discover_with_custom_roles(tree: Supervised) -> None:
    roles = (title_prefix("sched", "sglang::scheduler_TP"), Role("root", lambda _c, is_root: is_root))
    found = discover(tree.pid, roles)
    assert (len(found["sched"]), found["root"], len(found[OTHER])) == (1, (tree.pid,), len(TITLES) - 1 + 1)


def test_discover_of_a_gone_pid_is_empty() -> None:
    assert all(p == () for p in discover(2**22 + 1).values())


def test_wait_for_roles_returns_when_present(tree: Supervised) -> None:
    need = {"scheduler": 2, "detokenizer": 1}
    found = wait_for_roles(tree.pid, need, deadline_s=30, alive=tree.ensure_alive)
    assert len(found["scheduler"]) == 2


def test_wait_for_roles_times_out_listing_what_it_saw(tree: Supervised) -> None:
    t0 = time.monotonic()
    with pytest.raises(ProcessStartError, match=r"(?s)missing roles \{'scheduler': 3\}.*sglang::detokenizer"):
        wait_for_roles(tree.pid, {"scheduler": 3}, deadline_s=0.5, interval_s=0.1)
    assert 0.5 <= time.monotonic() - t0 < 5


def test_wait_for_roles_fails_at_once_when_root_exits(tmp_path: Path) -> None:
    spec = LaunchSpec(argv=(sys.executable, "-c", "raise SystemExit(2)"), log_path=tmp_path / "x.log")
    with Supervised.start(spec) as sup:
        t0 = time.monotonic()
        with pytest.raises(ProcessStartError, match="exited: missing roles"):
            wait_for_roles(sup.pid, ["scheduler"], deadline_s=60)
        assert time.monotonic() - t0 < 10
        with pytest.raises(ProcessCrashed, match="exited with code 2"):
            wait_for_roles(sup.pid, ["scheduler"], deadline_s=60, alive=sup.ensure_alive)
        assert sup.proc.returncode == 2  # the wait never reaped the child behind Popen's back


def test_wait_for_unknown_role_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="'schedular'"):
        wait_for_roles(1, ["schedular"], deadline_s=1)

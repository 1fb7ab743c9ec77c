"""The self-test workers' private /dev/shm (``perf_tests/support/private_shm.py``): what a process makes there stays
there, the host's /dev/shm never sees it, and the tmpfs goes with the process."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from perf_tests.support import child_env, private_shm

CHILD = """
import os, subprocess, sys
from perf_tests.support import private_shm
why = private_shm.enter()
assert why is None, why
name = sys.argv[1]
open(f"/dev/shm/{name}", "w").write("x")
seen = subprocess.run(["ls", "/dev/shm"], capture_output=True, text=True, check=True, timeout=30).stdout.split()
print(" ".join(seen))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or os.geteuid() != 0, reason="unshare and mount need root")
def test_a_segment_in_the_private_shm_is_seen_by_children_and_never_by_the_host() -> None:
    name = f"perf_private_probe_{uuid.uuid4().hex[:8]}"
    out = subprocess.run([sys.executable, "-c", CHILD, name], capture_output=True, text=True, env=child_env(),
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [name]  # a child sees it, and nothing of the host's /dev/shm
    assert not (Path("/dev/shm") / name).exists()  # the host never did, and nothing is left to remove


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mount namespaces are Linux's")
def test_without_root_it_changes_nothing_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    namespace = os.readlink("/proc/self/ns/mnt")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert private_shm.enter() == "needs root (CAP_SYS_ADMIN) for unshare and mount"
    assert os.readlink("/proc/self/ns/mnt") == namespace  # still the mount namespace it had

"""Real faults for the harness's soak (self-tests only): each is made with real kernel objects, never faked.

- ``ReadOnlyCgroupTree``: a v2-shaped cgroup directory on a tmpfs remounted read-only, so creating a sandbox in
  it is refused by the kernel (EROFS), as on a host whose cgroupfs is mounted read-only into the container.
- ``shm_nearly_full_cycle(...)``: runs one engine-fixture start in a private mount namespace whose /dev/shm is a
  64 MiB tmpfs filled to 60 MiB (``unshare --mount``), and returns the error it met (class, message, seconds).
- ``taken_port()``: a listening socket on a free port.
All need root for ``mount``/``unshare``; ``why_not_root()`` says what cannot be simulated without it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

NEARLY_FULL = """
import json, os, subprocess, sys, time
from pathlib import Path
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", "/dev/shm"], check=True)
fd = os.open("/dev/shm/filler", os.O_CREAT | os.O_RDWR, 0o600)
os.posix_fallocate(fd, 0, 60 << 20)
from engine_fixtures.engine.factory import EngineFactory
from engine_fixtures.engine.spec import EngineSpec
spec = EngineSpec(Path(sys.argv[2]), launcher=("-m", "perf_tests.support.stub_engine"), name="soak",
                  proof=False, env_extra=tuple(json.loads(sys.argv[3])))
factory = EngineFactory(Path(sys.argv[1]), deadline_s=30.0, stop_grace_s=1.0)
t0 = time.monotonic()
try:
    factory.get(spec)
    out = {"type": None, "message": "started", "elapsed_s": time.monotonic() - t0}
except Exception as exc:
    out = {"type": type(exc).__name__, "message": str(exc), "elapsed_s": time.monotonic() - t0}
finally:
    factory.close()
print(json.dumps(out))
"""


def why_not_root() -> str | None:
    if os.geteuid() != 0:
        return "needs root (mount, unshare)"
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return "needs util-linux's unshare and mount"
    return None


@dataclass(frozen=True)
class Met:
    """The error a fault met: class name, message, seconds from the fixture call to the error."""

    type: str | None
    message: str
    elapsed_s: float


def shm_nearly_full_cycle(workroot: Path, model: Path, env_extra: tuple[tuple[str, str], ...],
                          timeout_s: float = 120.0) -> Met:
    """One ``EngineFactory.get`` of the stub with /dev/shm nearly full (in a private mount namespace)."""
    workroot.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", sys.executable, "-c", NEARLY_FULL,
                           str(workroot), str(model), json.dumps(env_extra)],
                          capture_output=True, text=True, timeout=timeout_s, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the /dev/shm-full cycle could not run (exit {done.returncode}): {done.stderr[-2000:]}")
    data = json.loads(done.stdout.strip().splitlines()[-1])
    return Met(data["type"], data["message"], float(data["elapsed_s"]))


class ReadOnlyCgroupTree:
    """A v2-shaped cgroup directory (cpu delegated) on a read-only tmpfs: mkdir of a sandbox fails with EROFS."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> Path:
        self.path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(self.path)], check=True, timeout=30)
        (self.path / "cgroup.controllers").write_text("cpu io memory\n")
        (self.path / "cgroup.subtree_control").write_text("cpu\n")
        (self.path / "cgroup.procs").write_text("")
        subprocess.run(["mount", "-o", "remount,ro", str(self.path)], check=True, timeout=30)
        return self.path

    def __exit__(self, *exc: object) -> None:
        subprocess.run(["umount", str(self.path)], check=False, timeout=30)


@contextlib.contextmanager
def taken_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]

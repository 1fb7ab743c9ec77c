"""A private /dev/shm for one self-test process and everything it starts: its own tmpfs, in its own mount namespace.

The unit env's two pytest-xdist workers each call ``enter()`` once (``perf_tests/conftest.py``). Then a stub engine's
pool, a multiprocessing semaphore (``sem.mp-*``) or a leaked segment of one worker is invisible to the other's leak
checks, which count /dev/shm by name: the reason their engine trees used to run one test at a time (two factories
took each other's pools for leaks and removed them, CI 2026-12-04). The tmpfs goes with the namespace when the last
process in it exits, so nothing a worker leaves can outlive it; each test's own leak check still sees its leaks.

``unshare(CLONE_NEWNS)`` moves the calling thread (and the threads and processes it starts afterwards) into a copy
of the mount namespace; the copy's mounts are made private first, so the tmpfs mounted over /dev/shm never reaches
the host. Needs Linux and CAP_SYS_ADMIN (root on CI and here); elsewhere ``enter()`` changes nothing and says why, and
the workers keep the engine trees in one group (one test at a time), as before.
"""

from __future__ import annotations

import ctypes
import os
import sys

CLONE_NEWNS = 0x00020000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
SHM = b"/dev/shm"


def enter() -> str | None:
    """Give this thread, and what it starts from now on, its own empty /dev/shm. None once done; else why not
    (nothing changed)."""
    if not sys.platform.startswith("linux"):
        return "not Linux"
    if os.geteuid() != 0:
        return "needs root (CAP_SYS_ADMIN) for unshare and mount"
    libc = ctypes.CDLL(None, use_errno=True)
    steps = (("unshare(CLONE_NEWNS)", lambda: libc.unshare(CLONE_NEWNS)),
             ("mount --make-rprivate /", lambda: libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None)),
             ("mount -t tmpfs tmpfs /dev/shm", lambda: libc.mount(b"tmpfs", SHM, b"tmpfs", 0, b"mode=1777")))
    for what, call in steps:
        if call() != 0:  # a failed unshare leaves the namespace as it was; a failed mount leaves a private copy
            return f"{what}: {os.strerror(ctypes.get_errno())}"
    return None

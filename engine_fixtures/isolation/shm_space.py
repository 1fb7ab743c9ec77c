"""Room in /dev/shm before an engine starts: a nearly full /dev/shm is an error that names itself.

SGLang's multimodal feature transport puts every image in flight into /dev/shm; when a segment cannot be made
it falls back to inline transport without a word, and the suite would measure the wrong arm. A nearly full
/dev/shm (a small container default, or segments a killed run left) is therefore refused up front.

``require_shm_space(min_mb, shm_dir=SHM_DIR)``: ConfigError stating the free and total space, the largest
entries and the fixes, when less than ``min_mb`` MiB are free.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from engine_fixtures.errors import ConfigError

SHM_DIR = Path("/dev/shm")
MIB = 1 << 20


def _largest(shm_dir: Path, n: int = 3) -> list[tuple[str, int]]:
    sizes = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(shm_dir):
            with contextlib.suppress(OSError):
                sizes.append((entry.name, entry.stat(follow_symlinks=False).st_blocks * 512))
    return sorted(sizes, key=lambda x: -x[1])[:n]


def require_shm_space(min_mb: float, shm_dir: Path = SHM_DIR) -> None:
    if min_mb <= 0:
        return
    try:
        st = os.statvfs(shm_dir)
    except OSError as exc:
        raise ConfigError(f"{shm_dir} is not usable ({exc.strerror}); an engine needs it for its feature "
                          f"transport: mount a tmpfs there") from None
    free, total = st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize
    if free >= min_mb * MIB:
        return
    big = ", ".join(f"{name} ({size / MIB:.0f} MiB)" for name, size in _largest(shm_dir)) or "none"
    raise ConfigError(
        f"{shm_dir} is nearly full: {free / MIB:.0f} MiB free of {total / MIB:.0f} MiB, and an engine needs at "
        f"least {min_mb:g} MiB there (SGLang's feature transport puts every image in flight into it, and falls "
        f"back to inline transport silently when it cannot). Largest entries: {big}. Remove leftovers (a killed "
        f"run's are swept at the next session start), or enlarge it (docker run --shm-size=2g; mount -o "
        f"remount,size=2G {shm_dir})")

"""No tracked text file carries a merge's conflict markers (a merge once committed them into ARCHITECTURE.md, and
the architecture test, which reads module names, did not notice)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
MARKER = re.compile(r"^(<{7} |>{7} |={7}$)", re.M)
TEXT = (".py", ".md", ".toml", ".ini", ".sh", ".yml", ".yaml", ".cfg", ".txt", ".json")


def test_no_tracked_file_has_conflict_markers() -> None:
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                           check=True).stdout.split()
    found = []
    for name in files:
        path = ROOT / name
        if name.endswith(TEXT) and path.is_file() and path.stat().st_size < 2_000_000:
            text = path.read_text(errors="replace")
            found += [f"{name}:{text.count(chr(10), 0, m.start()) + 1}" for m in MARKER.finditer(text)]
    assert not found, f"merge conflict markers: {found[:10]}"

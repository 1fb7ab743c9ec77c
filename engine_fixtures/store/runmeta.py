"""Metadata of one run (suite commit, date, command line, versions) stored with results and baselines."""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import platform
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engine_fixtures import sglang_version
from engine_fixtures.machine import runner_label
from engine_fixtures.redact import command_line

VERSIONED_PACKAGES = ("sglang", "torch", "sglang-perf-suite", "scipy", "numpy")


def suite_commit(repo: Path | None = None) -> str:
    """``git rev-parse HEAD`` of the suite (``"unknown"`` outside a git checkout); 5 s timeout."""
    cwd = repo or Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True,
                             timeout=5, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 else "unknown"


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def versions() -> dict[str, str]:
    """Installed versions read from distribution metadata (nothing is imported); absent ones omitted."""
    found = {"python": platform.python_version()}
    for name in VERSIONED_PACKAGES:
        version = sglang_version.installed() if name == sglang_version.DISTRIBUTION else _dist_version(name)
        if version is not None:
            found[name] = version
    return found


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def run_metadata(argv: list[str] | None = None) -> dict[str, Any]:
    return {
        "suite_commit": suite_commit(),
        "date": now_iso(),
        "command": command_line(argv),  # secrets masked: a history URL's password
        "versions": versions(),
    }


def runner(labels: str = "", env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The machine that ran this: GitHub's RUNNER_NAME (else the host name) and ``--perf-runner-labels``."""
    return {"name": runner_label(env), "labels": sorted({x.strip() for x in labels.split(",") if x.strip()})}

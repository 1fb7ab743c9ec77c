"""The suite's pytest-benchmark export read back with pytest-benchmark's own code, for the self-tests: its
``FileStorage`` (what ``--benchmark-compare`` and ``pytest-benchmark compare`` load files through; a file it cannot
load, which it would only warn about and pass over, fails here) and its ``pytest-benchmark compare`` command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from pytest_benchmark.logger import Logger
from pytest_benchmark.storage.file import FileStorage

COMPARE = Path(sys.executable).parent / "pytest-benchmark"  # its console script, in this interpreter's env


class Strict(Logger):
    """pytest-benchmark's logger, but a warning (``Failed to load FILE: ...``) is an error."""

    def warning(self, text: str, *args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"pytest-benchmark: {text}")


def storage(where: Path) -> FileStorage:
    return FileStorage(where, logger=Strict())


def runs(*files: Path) -> list[dict[str, Any]]:
    """Each file's JSON as ``FileStorage.load`` reads it (its stats normalised as for a comparison)."""
    return [data for _, data in storage(files[0].parent).load(*map(str, files))]


def benchmarks(*files: Path) -> list[dict[str, Any]]:
    """Every entry of the files, flattened with its stats, as ``pytest-benchmark compare`` gets them."""
    return list(storage(files[0].parent).load_benchmarks(*map(str, files)))


def compare(*args: str, cwd: Path, storage: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``pytest-benchmark [--storage STORAGE] compare ARGS`` run in ``cwd`` (it imports a ``conftest.py`` found
    there, and parses the pytest configuration it finds from there)."""
    where = ("--storage", f"file://{storage}") if storage is not None else ()
    return subprocess.run([str(COMPARE), *where, "compare", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, check=False)

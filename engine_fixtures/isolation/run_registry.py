"""The machine-wide record of perf runs: who runs now, and who started and never finished.

The state directory (``--perf-state-dir``; default ``/run/lock/sglang-perf-suite``, else
``$TMPDIR/sglang-perf-suite``, mode 1777 so every user's runs share it) holds the machine lock
(``machine_lock``) and ``runs/<owner token>.json``, one small record per run, written when the run starts and
removed when it ends. A record whose run is dead names a run that was killed (job cancelled, runner rebooted,
OOM): the sweep (``sweep``) says so and cleans its results directory's half-written files.

Contracts:
- ``default_state_dir()``; ``state_dir(path)`` creates it (mode 1777) and returns it.
- ``register(state, results_dir) -> (Path | None, why)`` (atomically written, mode 0644 whatever the umask, the
  command line with its secrets masked (``redact.command_line``); None with the reason when the disk
  is full or the directory not writable: recording must never stop a run; None and no reason when this
  process's run is recorded already, by the outer session of an in-process pytester run); ``unregister(path)``.
- ``records(state) -> list[RunRecord]`` (unreadable or torn records are skipped, keys of newer versions ignored);
  ``record_temps(state)``. A record names the run's results and temp directories, where the sweep looks for
  what it left half done.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from engine_fixtures.isolation import owner
from engine_fixtures.redact import command_line

NAME = "sglang-perf-suite"
RECORD_MODE = 0o644


@dataclass(frozen=True)
class RunRecord:
    pid: int
    start_cs: int
    started: str
    command: str
    cwd: str
    results_dir: str
    tmp_dir: str = ""  # where its temp dirs go (``tempfile.gettempdir()``; "" in records of older versions)
    path: str = ""  # where the record lies (not stored in the file)

    @property
    def owner(self) -> owner.RunOwner:
        return owner.RunOwner(self.pid, self.start_cs)


def default_state_dir() -> Path:
    lock = Path("/run/lock")
    base = lock if lock.is_dir() and os.access(lock, os.W_OK | os.X_OK) else Path(tempfile.gettempdir())
    return base / NAME


def state_dir(path: Path) -> Path:
    """``path`` and its ``runs/``, created shared (mode 1777: every user's runs lock and register here)."""
    for d in (path, path / "runs"):
        if not d.is_dir():
            d.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(OSError):
                d.chmod(0o1777)
    return path


def register(state: Path, results_dir: Path) -> tuple[Path | None, str]:
    """Record this run; returns the record's path, or None and why it could not be written."""
    me = owner.current()
    record = RunRecord(me.pid, me.start_cs, me.started(), command_line()[:500], os.getcwd(),
                       str(Path(results_dir).resolve()), tempfile.gettempdir())
    path = state_dir(state) / "runs" / f"{me.token}.json"
    if path.exists():
        return None, ""  # a session run in-process by a test of this run (pytester): the outer session owns it
    tmp = path.with_name(f".{path.name}.tmp")
    data = {k: v for k, v in asdict(record).items() if k != "path"}
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, RECORD_MODE)
        with os.fdopen(fd, "w") as fh:
            os.fchmod(fd, RECORD_MODE)  # whatever the umask: other users' sweeps read it, nobody else writes it
            fh.write(json.dumps(data, sort_keys=True))
        tmp.replace(path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        return None, f"could not record this run in {path.parent} ({exc.strerror})"
    return path, ""


def unregister(path: Path | None) -> None:
    if path is not None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def records(state: Path) -> list[RunRecord]:
    known = {f.name for f in fields(RunRecord)} - {"path"}
    out = []
    for f in sorted((state / "runs").glob("*.json")):
        with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
            data = json.loads(f.read_text())  # keys a newer version added are left out
            out.append(RunRecord(**{k: v for k, v in data.items() if k in known}, path=str(f)))
    return out


def record_temps(state: Path) -> list[tuple[Path, owner.RunOwner]]:
    """Temp files of records (``.<token>.json.tmp``) with the run that was writing them."""
    found = []
    for f in (state / "runs").glob(".*.json.tmp"):
        run = owner.RunOwner.parse(f.name[1:].removesuffix(".json.tmp"))
        if run is not None:
            found.append((f, run))
    return found

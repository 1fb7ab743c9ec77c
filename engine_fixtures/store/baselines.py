"""Machine-keyed baseline files with atomic writes and format migrations.

Layout: ``<root>/<machine_key>/<file name>.json``, one file per scenario.

File names: a scenario id such as ``mech/copy=torch/quota=0.5`` contains ``/``; the file name is
``urllib.parse.quote(scenario, safe="=,+-_.")`` (so ``/`` -> ``%2F``, ``%`` -> ``%25``, spaces
``%20``) plus ``.json``; ``scenario_of(file_name)`` is the exact inverse (``unquote``). Ids that
would start with ``.`` get it escaped as ``%2E`` so no baseline is ever a hidden/temp file.

Format (``BASELINE_FORMAT_VERSION`` = 2): sorted keys, 2-space indent, newline at the end::

    {"format_version": 2, "scenario": ..., "arm": {...}, "machine_key": ...,
     "metrics": {name: {"samples": [...], "warmup": [...], "summary": {n, median, mean, stdev, cv,
                 min, max}, "tolerance": 0.1, "direction": "higher", "unit": "req/s", "gates": true}},
     "metadata": {suite_commit, date, command, versions, machine, ...}}

Version 1 (``{"version": 1, "scenario", "arm", "samples", "metadata"}``, no summaries or tolerances)
is migrated on read by ``migrate_v1_to_v2``; ``perf-baseline migrate`` rewrites such files on disk.
Unknown versions and corrupted files raise ``BaselineError`` naming the file and the command to run.

Writes are atomic: temp file in the same directory, fsync, ``os.replace``, fsync of the directory.
A writer killed at any moment leaves the old or the new file, never a torn one (an orphaned
``.<name>.*.tmp`` may remain; listings ignore it).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from engine_fixtures.errors import BaselineError
from engine_fixtures.judge.metrics import metric
from engine_fixtures.judge.summary import summarize
from engine_fixtures.store.results import RunResult

BASELINE_FORMAT_VERSION = 2
UPDATE_HINT = "perf-baseline update --from <results.json>` or `pytest --perf-update-baselines"
_SAFE = "=,+-_."


def file_name_of(scenario: str) -> str:
    """Filesystem-safe, reversible file name of a scenario id (see module docstring)."""
    name = urllib.parse.quote(scenario, safe=_SAFE)
    if name.startswith("."):
        name = "%2E" + name[1:]
    if len(name) + len(".json") > 255:
        raise BaselineError(f"scenario id {scenario!r} is too long for a baseline file name "
                            f"({len(name)} chars encoded); shorten the scenario id")
    return name + ".json"


def scenario_of(file_name: str) -> str:
    """Inverse of ``file_name_of``."""
    if not file_name.endswith(".json"):
        raise ValueError(f"not a baseline file name: {file_name!r}")
    return urllib.parse.unquote(file_name[: -len(".json")])


@dataclass(frozen=True)
class Baseline:
    """A stored baseline: raw samples per metric (warmup apart), tolerances used, metadata."""

    scenario: str
    arm: Mapping[str, str]
    machine_key: str
    samples: Mapping[str, tuple[float, ...]]
    warmup: Mapping[str, tuple[float, ...]] = field(default_factory=lambda: MappingProxyType({}))
    tolerances: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    metadata: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def from_result(cls, result: RunResult, machine_key: str, metadata: Mapping[str, Any] | None = None,
                    tolerance: float | None = None) -> Baseline:
        """``tolerance`` (e.g. ``--perf-tolerance``) overrides the registry's value for gated metrics."""
        tolerances = {}
        for name in result.samples:
            m = metric(name)
            tolerances[name] = tolerance if tolerance is not None and m.gates else m.tolerance
        return cls(result.scenario, result.arm, machine_key, result.samples, result.warmup, tolerances,
                   {**result.metadata, **(metadata or {})})

    def to_json(self) -> dict[str, Any]:
        metrics: dict[str, Any] = {}
        for name, values in self.samples.items():
            m = metric(name)
            metrics[name] = {
                "samples": list(values),
                "warmup": list(self.warmup.get(name, ())),
                "summary": summarize(values).to_json(),
                "tolerance": self.tolerances.get(name, m.tolerance),
                "direction": m.direction,
                "unit": m.unit,
                "gates": m.gates,
            }
        return {
            "format_version": BASELINE_FORMAT_VERSION,
            "scenario": self.scenario,
            "arm": dict(self.arm),
            "machine_key": self.machine_key,
            "metrics": metrics,
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Baseline:
        metrics = data["metrics"]
        return cls(
            scenario=data["scenario"],
            arm=MappingProxyType(dict(data.get("arm", {}))),
            machine_key=data["machine_key"],
            samples=MappingProxyType({k: tuple(map(float, v["samples"])) for k, v in metrics.items()}),
            warmup=MappingProxyType({k: tuple(map(float, v.get("warmup", ()))) for k, v in metrics.items()}),
            tolerances=MappingProxyType({k: float(v["tolerance"]) for k, v in metrics.items()}),
            metadata=MappingProxyType(dict(data.get("metadata", {}))),
        )


@dataclass(frozen=True)
class MissingBaseline:
    """No baseline for this scenario on this machine: the caller skips with ``reason``."""

    scenario: str
    path: Path

    @property
    def reason(self) -> str:
        return (f"no baseline for {self.scenario!r} at {self.path}; create it with "
                f"`{UPDATE_HINT}` (this run's result was recorded)")


def migrate_v1_to_v2(data: Mapping[str, Any], machine_key: str) -> dict[str, Any]:
    """v1 had flat ``samples`` and no summaries or tolerances: add them from the metric registry."""
    result = RunResult(scenario=data["scenario"], arm=data.get("arm", {}), samples=data["samples"],
                       warmup=data.get("warmup", {}), metadata=data.get("metadata", {}))
    return Baseline.from_result(result, machine_key).to_json()


MIGRATIONS: Mapping[int, Callable[[Mapping[str, Any], str], dict[str, Any]]] = MappingProxyType(
    {1: migrate_v1_to_v2}
)


def format_version_of(data: Any) -> Any:
    if not isinstance(data, dict):
        return None
    return data.get("format_version", data.get("version"))


def dumps(data: Mapping[str, Any]) -> str:
    return json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n"


def atomic_write_text(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically and durably (temp + fsync + rename + dir fsync)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class BaselineStore:
    """Baselines of one machine key under ``root``."""

    def __init__(self, root: Path, machine_key: str) -> None:
        if not machine_key or "/" in machine_key or machine_key.startswith("."):
            raise BaselineError(f"invalid machine key {machine_key!r}: it must be a non-empty directory name")
        self.root = Path(root)
        self.machine_key = machine_key
        self.dir = self.root / machine_key

    def path_for(self, scenario: str) -> Path:
        return self.dir / file_name_of(scenario)

    def read_raw(self, path: Path) -> dict[str, Any]:
        """Parsed JSON of ``path``; ``BaselineError`` naming the file when it is corrupted."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise BaselineError(
                f"baseline file {path} is corrupted ({exc}); restore it from git or recreate it with "
                f"`{UPDATE_HINT}`"
            ) from None
        if not isinstance(data, dict):
            raise BaselineError(f"baseline file {path} is not a JSON object; "
                                f"recreate it with `{UPDATE_HINT}`")
        return data

    def load(self, scenario: str) -> Baseline | MissingBaseline:
        """The baseline of ``scenario``, migrated in memory if it is in an older format."""
        path = self.path_for(scenario)
        if not path.exists():
            return MissingBaseline(scenario, path)
        return self._parse(path, self.read_raw(path))

    def _parse(self, path: Path, data: dict[str, Any]) -> Baseline:
        version = format_version_of(data)
        if version in MIGRATIONS:
            data = self._migrate(path, data)
        elif version != BASELINE_FORMAT_VERSION:
            raise BaselineError(
                f"baseline file {path} has format version {version!r}, this suite reads "
                f"{BASELINE_FORMAT_VERSION} (and migrates {sorted(MIGRATIONS)}); "
                f"recreate it with `{UPDATE_HINT}`"
            )
        try:
            baseline = Baseline.from_json(data)
            for name in baseline.samples:
                metric(name)
        except (KeyError, TypeError, ValueError) as exc:
            raise BaselineError(
                f"baseline file {path} is malformed ({exc}); recreate it with `{UPDATE_HINT}`"
            ) from None
        if baseline.scenario != scenario_of(path.name):
            raise BaselineError(f"baseline file {path} holds scenario {baseline.scenario!r}, not "
                                f"{scenario_of(path.name)!r}; recreate it with `{UPDATE_HINT}`")
        return baseline

    def _migrate(self, path: Path, data: dict[str, Any]) -> dict[str, Any]:
        version = format_version_of(data)
        while version in MIGRATIONS:
            try:
                data = MIGRATIONS[version](data, self.machine_key)
            except (KeyError, TypeError, ValueError) as exc:
                raise BaselineError(f"baseline file {path} (format {version}) cannot be migrated ({exc}); "
                                    f"recreate it with `{UPDATE_HINT}`") from None
            version = format_version_of(data)
        return data

    def write(self, baseline: Baseline) -> Path:
        """Write ``baseline`` atomically; returns its path."""
        if baseline.machine_key != self.machine_key:
            raise BaselineError(f"baseline for machine {baseline.machine_key!r} written to store "
                                f"{self.machine_key!r}; use BaselineStore(root, {baseline.machine_key!r})")
        path = self.path_for(baseline.scenario)
        atomic_write_text(path, dumps(baseline.to_json()))
        return path

    def paths(self) -> Iterator[Path]:
        """Baseline files of this machine key (temp files ignored), sorted."""
        if not self.dir.is_dir():
            return iter(())
        return iter(sorted(p for p in self.dir.glob("*.json") if not p.name.startswith(".")))

    def scenarios(self) -> list[str]:
        return [scenario_of(p.name) for p in self.paths()]

    def migrate_all(self, dry_run: bool = False) -> list[Path]:
        """Rewrite every older-format file in the current format; returns the paths migrated."""
        done = []
        for path in self.paths():
            data = self.read_raw(path)
            if format_version_of(data) == BASELINE_FORMAT_VERSION:
                continue
            baseline = self._parse(path, data)
            if not dry_run:
                atomic_write_text(path, dumps(baseline.to_json()))
            done.append(path)
        return done


def machine_keys(root: Path) -> list[str]:
    """Machine keys that have a baseline directory under ``root``."""
    root = Path(root)
    return sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")) \
        if root.is_dir() else []

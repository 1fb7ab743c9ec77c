"""The one results format shared by every tier: ``RunResult`` and the versioned ``ResultsFile``.

Contract:
- ``RunResult.samples[metric]`` holds one finite float per *measured* repeat; ``warmup`` has the
  same shape and is kept apart (never judged). Every metric name must resolve through
  ``judge.metrics.metric`` so a typo fails at construction, not silently at judging time.
- A metric measured in only some of the windows (a per-segment value, on the segment's first window; a role that
  idled) names its windows in ``metadata["sample_windows"][metric]`` (their indices, in order; checked against the
  samples at construction); ``windows_of(metric)`` reads it, every window in order where it says nothing, and
  ``aligned(key, metric)`` picks a per-window metadata list (``window_instance``, ``window_block``) for the samples,
  and ``block_windows()`` gives a live arm's windows back as ``(block, values)``, as its runner held them.
- An empty sample tuple is rejected: "zero completed requests" must be a ``MeasurementError``
  raised by the producer, never a result.
- JSON: ``to_json()``/``from_json()`` are exact inverses; ``ResultsFile`` carries ``format_version``
  and refuses unknown versions with a ``BaselineError`` that names the fix.
- ``ResultsFile.dumps()``: sorted keys, 2-space indent, except that a list of numbers inside a list (a table row,
  such as the per-request rows of ``metadata["requests"]``, ``scenarios.segment.window_requests``) stays on one
  line: a run's thousands of request records cost a few hundred kB, not megabytes of indentation. The same JSON
  either way, so files written before this layout read the same.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from engine_fixtures.errors import BaselineError
from engine_fixtures.judge.metrics import metric

RESULTS_FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)

Samples = Mapping[str, tuple[float, ...]]
SAMPLE_WINDOWS_KEY = "sample_windows"  # metadata: metric -> the window index of each sample, where not every window
BLOCK_KEY = "window_block"  # metadata: the mirrored block each window belongs to (live arms, groups of engines)

# An indented list of numbers that starts its own line, i.e. an element of a list (a dict's list follows its key
# on the key's line). JSON strings hold no raw newline, so the match never reaches into one.
_NUMBER = r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
_ROW = re.compile(rf"^(?P<indent> *)\[\n(?P<items>(?: *{_NUMBER},\n)* *{_NUMBER})\n *\]", re.MULTILINE)


def _rows_on_one_line(text: str) -> str:
    return _ROW.sub(lambda m: m["indent"] + "[" + ", ".join(x.strip() for x in m["items"].split(",\n")) + "]", text)


def freeze_samples(
    raw: Mapping[str, Sequence[float]], what: str, scenario: str, *, allow_empty: bool
) -> Samples:
    """``raw`` (metric -> values) frozen, sorted by metric; ``TypeError``/``ValueError`` naming ``scenario`` and
    ``what`` for a value that no measurement gives: not a mapping of sequences of numbers, an unknown metric, an
    empty sequence (unless ``allow_empty``), a value that is not finite. The one check of a samples mapping, for
    results and for the runs of a pool (``store.baselines``)."""
    if not isinstance(raw, Mapping):
        raise TypeError(f"{scenario}: {what} must be a mapping of metric names to numbers, got {raw!r}")
    out: dict[str, tuple[float, ...]] = {}
    for name, values in raw.items():
        metric(name)  # raises UnknownMetric naming the known ones
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
            raise TypeError(f"{scenario}: {what}[{name!r}] must be a sequence of numbers, got {values!r}")
        vals = tuple(float(v) for v in values)
        if not vals and not allow_empty:
            raise ValueError(f"{scenario}: {what}[{name!r}] is empty (no measured window; where nothing was "
                             "measured the producer raises MeasurementError, never records an empty metric)")
        bad = [v for v in vals if not math.isfinite(v)]
        if bad:
            raise ValueError(f"{scenario}: {what}[{name!r}] has non-finite values {bad}")
        out[name] = vals
    return MappingProxyType(dict(sorted(out.items())))


@dataclass(frozen=True)
class RunResult:
    """One measured scenario: raw per-repeat samples per metric, warmup kept apart."""

    scenario: str
    arm: Mapping[str, str]
    samples: Samples
    warmup: Samples = field(default_factory=lambda: MappingProxyType({}))
    metadata: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        if not self.scenario or not isinstance(self.scenario, str):
            raise ValueError(f"RunResult.scenario must be a non-empty stable id, got {self.scenario!r}")
        if not self.samples:
            raise ValueError(f"{self.scenario}: RunResult has no samples")
        object.__setattr__(self, "arm", MappingProxyType({str(k): str(v) for k, v in self.arm.items()}))
        samples = freeze_samples(self.samples, "samples", self.scenario, allow_empty=False)
        warmup = freeze_samples(self.warmup, "warmup", self.scenario, allow_empty=True)
        object.__setattr__(self, "samples", samples)
        object.__setattr__(self, "warmup", warmup)
        object.__setattr__(self, "metadata", MappingProxyType(dict(self.metadata)))
        for name, where in dict(self.metadata.get(SAMPLE_WINDOWS_KEY) or {}).items():
            if name in self.samples and len(where) != len(self.samples[name]):
                raise ValueError(f"{self.scenario}: metadata[{SAMPLE_WINDOWS_KEY!r}][{name!r}] names {len(where)} "
                                 f"windows for {len(self.samples[name])} samples")

    def windows_of(self, name: str) -> tuple[int, ...]:
        """The window index of each of ``samples[name]`` (see the module docstring)."""
        where = dict(self.metadata.get(SAMPLE_WINDOWS_KEY) or {}).get(name)
        return tuple(int(i) for i in where) if where is not None else tuple(range(len(self.samples[name])))

    def block_windows(self) -> list[tuple[int, dict[str, float]]]:
        """The windows as the live runner held them, ``(block, {metric: value})`` in order: every sample on its own
        window (``windows_of``), each window labelled with its mirrored block (``metadata["window_block"]``).
        ``ValueError`` where the result keeps no blocks (not a live arm or group member)."""
        blocks = self.metadata.get(BLOCK_KEY)
        if not isinstance(blocks, (list, tuple)) or not blocks:
            raise ValueError(f"{self.scenario}: no metadata[{BLOCK_KEY!r}]: not the windows of a live arm or group")
        windows: list[tuple[int, dict[str, float]]] = [(int(b), {}) for b in blocks]
        for name, values in self.samples.items():
            for i, value in zip(self.windows_of(name), values, strict=True):
                windows[i][1][name] = value
        return windows

    def aligned(self, key: str, name: str) -> list[Any] | None:
        """The per-window metadata list ``metadata[key]`` at the windows of ``samples[name]``; None when the result
        has no such list or it does not cover those windows (written before the runner kept it)."""
        per_window = self.metadata.get(key)
        where = self.windows_of(name)
        if not isinstance(per_window, (list, tuple)) or (where and max(where) >= len(per_window)):
            return None
        if SAMPLE_WINDOWS_KEY not in self.metadata and len(per_window) != len(where):
            return None  # written before sparse metrics named their windows: the two cannot be lined up
        return [per_window[i] for i in where]

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "arm": dict(self.arm),
            "samples": {k: list(v) for k, v in self.samples.items()},
            "warmup": {k: list(v) for k, v in self.warmup.items()},
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunResult:
        try:
            return cls(scenario=data["scenario"], arm=data.get("arm", {}), samples=data["samples"],
                       warmup=data.get("warmup", {}), metadata=data.get("metadata", {}))
        except KeyError as exc:
            raise ValueError(f"a run result is missing the key {exc}") from None


OUTCOME_ORDER = ("regression", "inconclusive", "improvement", "pass")


@dataclass(frozen=True)
class ResultsFile:
    """All results of one run plus the run's metadata and verdicts (what ``--perf-results-dir`` receives).

    ``verdicts[scenario][metric]`` is each row's status; ``injection`` names a deliberate slowdown or fault
    (``--perf-inject``, a patched build) and ``reference`` the build an A/B run compared against: runs with
    either are never turned into baselines. ``runner`` (optional) names the machine that ran it and its labels
    (``{"name": ..., "labels": [...]}``), which the run history indexes. Format 1 files (no verdicts) are still
    read."""

    results: tuple[RunResult, ...]
    machine_key: str
    machine: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    suite_commit: str = ""
    date: str = ""  # ISO 8601, UTC
    command: str = ""
    versions: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    run_id: str = ""
    verdicts: Mapping[str, Mapping[str, str]] = field(default_factory=lambda: MappingProxyType({}))
    injection: str = ""
    reference: str = ""
    runner: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))  # {"name", "labels"}
    format_version: int = RESULTS_FORMAT_VERSION

    def __post_init__(self) -> None:
        object.__setattr__(self, "results", tuple(self.results))
        object.__setattr__(self, "machine", MappingProxyType(dict(self.machine)))
        object.__setattr__(self, "versions", MappingProxyType(dict(self.versions)))
        object.__setattr__(self, "runner", MappingProxyType(dict(self.runner)))
        object.__setattr__(self, "verdicts", MappingProxyType({k: MappingProxyType(dict(v))
                                                               for k, v in self.verdicts.items()}))
        if not self.run_id:
            object.__setattr__(self, "run_id", f"{self.machine_key}@{self.date}")

    def outcome(self, scenario: str) -> str:
        """The scenario's worst verdict in this run (``unjudged`` when none was recorded)."""
        statuses = set(self.verdicts.get(scenario, {}).values())
        return next((s for s in OUTCOME_ORDER if s in statuses), "unjudged")

    def to_json(self) -> dict[str, Any]:
        runner = {"runner": dict(self.runner)} if self.runner else {}  # optional: older readers ignore it
        return {
            **runner,
            "format_version": self.format_version,
            "run_id": self.run_id,
            "machine_key": self.machine_key,
            "machine": dict(self.machine),
            "suite_commit": self.suite_commit,
            "date": self.date,
            "command": self.command,
            "versions": dict(self.versions),
            "verdicts": {k: dict(v) for k, v in self.verdicts.items()},
            "injection": self.injection,
            "reference": self.reference,
            "results": [r.to_json() for r in self.results],
        }

    def dumps(self) -> str:
        """The file's text: sorted keys, 2-space indent, table rows on one line (the module docstring)."""
        return _rows_on_one_line(json.dumps(self.to_json(), indent=2, sort_keys=True)) + "\n"

    @classmethod
    def from_json(cls, data: Mapping[str, Any], source: str = "<data>") -> ResultsFile:
        version = data.get("format_version") if isinstance(data, Mapping) else None
        if version not in READABLE_VERSIONS:
            raise BaselineError(
                f"{source}: results format_version {version!r} is not one of {READABLE_VERSIONS}; "
                "re-run the suite with this version to produce a fresh results file"
            )
        try:
            return cls(
                results=tuple(RunResult.from_json(r) for r in data["results"]),
                machine_key=data["machine_key"],
                machine=data.get("machine", {}),
                suite_commit=data.get("suite_commit", ""),
                date=data.get("date", ""),
                command=data.get("command", ""),
                versions=data.get("versions", {}),
                run_id=data.get("run_id", ""),
                verdicts=data.get("verdicts", {}),
                injection=data.get("injection", ""),
                reference=data.get("reference", ""),
                runner=data.get("runner", {}),
            )
        except (KeyError, ValueError, TypeError, AttributeError) as exc:
            raise BaselineError(
                f"{source}: not a valid results file ({exc}); re-run the suite to regenerate it"
            ) from None

    @classmethod
    def load(cls, path: Path) -> ResultsFile:
        """Read a results JSON; ``BaselineError`` names the file when it is unreadable or malformed."""
        try:
            data = json.loads(Path(path).read_text())
        except FileNotFoundError:
            raise BaselineError(f"results file {path} does not exist; pass a results JSON written by a "
                                "suite run (see --perf-results-dir)") from None
        except (OSError, ValueError) as exc:
            raise BaselineError(
                f"results file {path} cannot be read as JSON ({exc}); re-run the suite"
            ) from None
        return cls.from_json(data, source=str(path))

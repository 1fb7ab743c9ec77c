"""Pooled, machine-keyed baselines: K independent runs per scenario, so the spread between runs is measured.

Layout: ``<root>/<machine_key>/<scenario file name>.json`` (``store.files``), one file per scenario.

Format (``BASELINE_FORMAT_VERSION`` = 3; sorted keys, 2-space indent)::

    {"format_version": 3, "scenario": ..., "arm": {...}, "machine_key": ..., "host": {...} | null,
     "runs": [{"run_id", "date", "suite_commit", "command", "versions", "verdict", "accepted",
               "samples": {metric: [one value per window]}, "warmup": {...}, "metadata": {...}}, ...],
     "noise": {metric: {"runs", "windows", "level", "between_cv", "within_cv", "detectable"}},
     "metadata": {...}}

``"host"`` (``machine.HostIdentity``: GPU UUIDs, CPU model and max clock, kernel, runner label) is the host
that recorded the pool. A pool judges only runs of that host (``HostIdentity.same_host``): ``load`` gives a pool
of another host the same ``MissingBaseline`` (a ``no-baseline`` row naming both hosts and the command that
records this host's pool) as no file at all. Files written before pools recorded their host (format 3 without
``host``, and formats 1 and 2) stay readable (``pool``, ``perf-baseline show``) but never judge: their host is
unknown. The machine key stays the directory, so two hosts of one key share a path: keep each runner's pools
in its own ``PERF_BASELINE_DIR``.

Each run is one independent measurement (its own process and engine start); ``verdict`` is what that run was
judged (``unjudged`` for runs recorded before verdicts existed) and ``accepted`` the reason given with
``--accept`` when a run judged ``regression``/``inconclusive`` was recorded anyway. ``noise`` is derived on
every write (for people reading a diff); the judge recomputes it from the runs. A pool keeps the newest
``MAX_RUNS`` runs. Formats 1 and 2 (one run, no pool) migrate on read into a one-run pool, which judges
nothing until more runs are added: between-run spread needs ``MIN_RUNS`` runs.
Unknown versions and corrupted files raise ``BaselineError`` naming the file and the command to run, and so
does a pool whose content no measurement gives (checked where every pool is read, ``BaselineRun.from_json``):
``samples`` not a mapping of known metrics to numbers, an empty run or metric, a value that is not finite or,
on a metric judged on the log scale, not > 0. The session reads such a pool as an unreadable one
(``MissingBaseline.unreadable``: only its rows fail); ``perf-baseline`` stops with the message.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from engine_fixtures.errors import BaselineError
from engine_fixtures.judge.decide import BETA, gate_alpha, promised_size
from engine_fixtures.judge.gating import arm_of, gating
from engine_fixtures.judge.metrics import metric
from engine_fixtures.judge.noise import MIN_RUNS, NoiseModel
from engine_fixtures.judge.rows import worse_change
from engine_fixtures.judge.sequential import DEFAULT_MAX_REPEATS, DEFAULT_REPEATS, Budget
from engine_fixtures.machine import HostIdentity, host_of
from engine_fixtures.store.files import atomic_write_text, dumps, file_name_of, scenario_of
from engine_fixtures.store.results import ResultsFile, RunResult, freeze_samples

BASELINE_FORMAT_VERSION = 3
MAX_RUNS = 10
POOL_RUNS = 5  # the pool size recorded by default: simulated false alarms stay within nominal from K = 5 (docs/results)
UPDATE_HINT = (f"`perf-baseline update --from-runs {POOL_RUNS}` (pools this host's newest {POOL_RUNS} clean runs "
               "from the run history) or `pytest --perf-update-baselines` once per run")


def default_gate_alpha(family: int) -> float:
    """The per-cell alpha the gate uses at the default budget (``--perf-repeats``/``--perf-max-repeats``
    defaults: alpha / looks) for a scenario with ``family`` gating metrics: what published promises use."""
    n, most = DEFAULT_REPEATS, DEFAULT_MAX_REPEATS
    return gate_alpha(Budget(n, n, max(n, most)).alpha_per_look(), max(1, family))

Samples = Mapping[str, tuple[float, ...]]


def _stored_samples(raw: Any, what: str, run_id: str, judged: bool) -> Samples:
    """A pooled run's ``samples`` (``judged``) or ``warmup`` as read from its file, checked as a measurement's are
    (``results.freeze_samples``: a mapping, known metrics, finite values; the samples none empty, and each on the
    scale its metric is judged on: ``Scale.problem``, > 0 on the log scale). A value no measurement gives fails
    this pool's read (``ValueError``, the file named by ``BaselineStore``), never the judge that takes its log."""
    frozen = freeze_samples(raw, what, f"run {run_id}", allow_empty=not judged)
    if judged and not frozen:
        raise ValueError(f"run {run_id}: {what} is empty; a pooled run holds at least one metric's windows")
    for name, values in frozen.items():
        if judged and (why := metric(name).scale.problem(values)) is not None:
            raise ValueError(f"run {run_id}: {what}[{name!r}] has {why}")
    return frozen


# Kept in the run's results file, not copied into every pool run: the per-request records behind each window
# (hundreds of kB a run; the results file and the run history keep them for recomputing an estimator).
RUN_ONLY_METADATA = frozenset({"requests"})


@dataclass(frozen=True)
class BaselineRun:
    """One pooled run: its windows per metric and where it came from."""

    run_id: str
    date: str
    samples: Samples
    warmup: Samples = field(default_factory=lambda: MappingProxyType({}))
    suite_commit: str = ""
    command: str = ""
    versions: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    verdict: str = "unjudged"
    accepted: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def from_result(cls, result: RunResult, results: ResultsFile, accepted: str | None = None) -> BaselineRun:
        return cls(results.run_id, results.date, result.samples, result.warmup, results.suite_commit,
                   results.command, dict(results.versions), results.outcome(result.scenario), accepted,
                   {k: v for k, v in result.metadata.items() if k not in RUN_ONLY_METADATA})

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "date": self.date, "suite_commit": self.suite_commit, "command": self.command,
                "versions": dict(self.versions), "verdict": self.verdict, "accepted": self.accepted,
                "samples": {k: list(v) for k, v in self.samples.items()},
                "warmup": {k: list(v) for k, v in self.warmup.items()}, "metadata": dict(self.metadata)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BaselineRun:
        run_id = str(data["run_id"])
        return cls(run_id, str(data.get("date", "")), _stored_samples(data["samples"], "samples", run_id, True),
                   _stored_samples(data.get("warmup", {}), "warmup", run_id, False), data.get("suite_commit", ""),
                   data.get("command", ""),
                   MappingProxyType(dict(data.get("versions", {}))), data.get("verdict", "unjudged"),
                   data.get("accepted"), MappingProxyType(dict(data.get("metadata", {}))))


@dataclass(frozen=True)
class Baseline:
    """A scenario's pool of runs on one machine key, recorded on ``host`` (None: a file from before hosts were
    recorded, which never judges)."""

    scenario: str
    arm: Mapping[str, str]
    machine_key: str
    runs: tuple[BaselineRun, ...]
    metadata: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    host: HostIdentity | None = None

    def runs_for(self, name: str) -> list[tuple[float, ...]]:
        """Per-run windows of ``name`` (runs that did not measure it are left out)."""
        return [r.samples[name] for r in self.runs if r.samples.get(name)]

    def metric_names(self) -> list[str]:
        return sorted({n for r in self.runs for n in r.samples})

    def with_run(self, run: BaselineRun, max_runs: int = MAX_RUNS) -> Baseline:
        """This pool plus ``run`` (a run id already pooled is replaced), keeping the newest ``max_runs``."""
        kept = [r for r in self.runs if r.run_id != run.run_id] + [run]
        return replace(self, runs=tuple(kept[-max_runs:]))

    def noise(self) -> dict[str, dict[str, Any]]:
        """Per judged metric: runs, windows, level and the spread between and within runs, and what the pool
        promises to catch (derived; for people reading the file), with the gate's own formula
        (``decide.promised_size``) at the alpha the gate uses at the default budget (``default_gate_alpha``)."""
        out: dict[str, dict[str, Any]] = {}
        alpha = default_gate_alpha(len(gating(self.metric_names(), arm_of(self.scenario))))
        for name in self.metric_names():
            m = metric(name)
            runs = self.runs_for(name)
            if not m.judged or not runs:
                continue
            model = NoiseModel.fit([m.scale.forward(r) for r in runs])
            entry: dict[str, Any] = {"runs": model.runs, "windows": list(model.windows),
                                     "level": _round(math.exp(model.level) if m.scale.name == "log" else model.level),
                                     "between_sd": _round(model.between_sd), "within_sd": _round(model.within_sd),
                                     "scale": m.scale.name}
            if model.runs >= MIN_RUNS:
                entry["detectable"] = _round(worse_change(m, promised_size(model, m.scale_floor, alpha, BETA)))
            out[name] = entry
        return out

    def to_json(self) -> dict[str, Any]:
        return {"format_version": BASELINE_FORMAT_VERSION, "scenario": self.scenario, "arm": dict(self.arm),
                "machine_key": self.machine_key, "host": self.host.to_json() if self.host is not None else None,
                "runs": [r.to_json() for r in self.runs], "noise": self.noise(), "metadata": dict(self.metadata)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Baseline:
        runs = tuple(BaselineRun.from_json(r) for r in data["runs"])
        if not runs:
            raise ValueError("a baseline without runs")
        return cls(data["scenario"], MappingProxyType(dict(data.get("arm", {}))), data["machine_key"], runs,
                   MappingProxyType(dict(data.get("metadata", {}))), HostIdentity.from_json(data.get("host")))


def _round(x: float) -> float:
    return float(f"{x:.6g}")


@dataclass(frozen=True)
class MissingBaseline:
    """No baseline for this scenario on this host: no file, a pool recorded on another host (``found``: that
    host, or that the file has no host record) that cannot judge ``host`` (this one), or a file that cannot be
    read (``unreadable``: the ``BaselineError`` naming it and the fix)."""

    scenario: str
    path: Path
    found: str | None = None
    host: str | None = None
    unreadable: str | None = None

    @property
    def reason(self) -> str:
        record = f"from >= {MIN_RUNS} independent runs with {UPDATE_HINT} (this run's result was recorded)"
        if self.unreadable is not None:
            return f"{self.scenario!r} is not judged against its pool: {self.unreadable}"
        if self.found is None:
            return f"no baseline for {self.scenario!r} at {self.path}; record one {record}"
        return (f"no baseline for {self.scenario!r} on this host: the pool at {self.path} was recorded on "
                f"{self.found}, and this host is {self.host or 'unknown'}; a pool judges only the host that "
                f"recorded it: record this host's pool {record}")


def _foreign(baseline: Baseline, here: HostIdentity | None) -> str | None:
    """Why ``baseline`` cannot judge runs of ``here``, as the 'recorded on' part of a message; None if it can."""
    if baseline.host is None:
        return "an unknown host (the file has no host record: written before pools recorded their host)"
    if here is None or not here.same_host(baseline.host):
        return f"another host, {baseline.host.describe()}"
    return None


def migrate_v1_to_v2(data: Mapping[str, Any], machine_key: str) -> dict[str, Any]:
    """v1 had flat ``samples`` and no summaries: v2's per-metric layout."""
    metrics = {k: {"samples": list(v), "warmup": list(data.get("warmup", {}).get(k, ()))}
               for k, v in data["samples"].items()}
    return {"format_version": 2, "scenario": data["scenario"], "arm": data.get("arm", {}), "machine_key": machine_key,
            "metrics": metrics, "metadata": data.get("metadata", {})}


def migrate_v2_to_v3(data: Mapping[str, Any], machine_key: str) -> dict[str, Any]:
    """v2 held one run's samples: it becomes a pool of that one run (its verdict unknown)."""
    meta = dict(data.get("metadata", {}))
    run = {"run_id": f"{machine_key}@{meta.get('date', 'unknown')}", "date": meta.get("date", ""),
           "suite_commit": meta.get("suite_commit", ""), "command": meta.get("command", ""),
           "versions": meta.get("versions", {}), "verdict": "unjudged", "accepted": None,
           "samples": {k: v["samples"] for k, v in data["metrics"].items()},
           "warmup": {k: v.get("warmup", []) for k, v in data["metrics"].items()},
           "metadata": {k: v for k, v in meta.items() if k not in ("date", "suite_commit", "command", "versions",
                                                                     "machine")}}
    return {"format_version": 3, "scenario": data["scenario"], "arm": data.get("arm", {}), "machine_key": machine_key,
            "runs": [run], "metadata": {"machine": meta.get("machine", {}), "migrated_from": 2}}


MIGRATIONS: Mapping[int, Callable[[Mapping[str, Any], str], dict[str, Any]]] = MappingProxyType(
    {1: migrate_v1_to_v2, 2: migrate_v2_to_v3}
)


def format_version_of(data: Any) -> Any:
    if not isinstance(data, dict):
        return None
    return data.get("format_version", data.get("version"))


class BaselineStore:
    """Baselines of one machine key under ``root``, judging runs of ``host`` (this host; None: an unknown host,
    which no pool judges)."""

    def __init__(self, root: Path, machine_key: str, host: HostIdentity | None = None) -> None:
        if not machine_key or "/" in machine_key or machine_key.startswith("."):
            raise BaselineError(f"invalid machine key {machine_key!r}: it must be a non-empty directory name")
        self.root = Path(root)
        self.machine_key = machine_key
        self.host = host
        self.dir = self.root / machine_key

    def path_for(self, scenario: str) -> Path:
        return self.dir / file_name_of(scenario)

    def read_raw(self, path: Path) -> dict[str, Any]:
        """Parsed JSON of ``path``; ``BaselineError`` naming the file when it is corrupted."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise BaselineError(f"baseline file {path} is corrupted ({exc}); restore it from git "
                                f"(`git checkout -- {path}`) or recreate it with {UPDATE_HINT}") from None
        if not isinstance(data, dict):
            raise BaselineError(f"baseline file {path} is not a JSON object; recreate it with {UPDATE_HINT}")
        return data

    def load(self, scenario: str) -> Baseline | MissingBaseline:
        """The pool that judges ``scenario`` on this store's host (migrated in memory if it is in an older format);
        ``MissingBaseline`` when there is none, or when the stored pool is another host's or has no host record."""
        path = self.path_for(scenario)
        stored = self.pool(scenario)
        if stored is None:
            return MissingBaseline(scenario, path)
        found = _foreign(stored, self.host)
        if found is not None:
            return MissingBaseline(scenario, path, found, self.host.describe() if self.host is not None else None)
        return stored

    def misfiled(self, scenario: str, base: Baseline) -> str | None:
        """Why ``base``, read from this store's folder, judges nothing here: it was recorded for another machine key
        (copied or moved by hand), and a pool judges only the machine key it was recorded on. None: it belongs."""
        if base.machine_key == self.machine_key:
            return None
        return (f"baseline file {self.path_for(scenario)} was recorded for machine key {base.machine_key!r} but lies "
                f"in the folder of {self.machine_key!r}, and a pool judges only the machine key it was recorded on; "
                f"move it to {self.dir.parent / base.machine_key}/ if it belongs there, or record this key's pool "
                f"with {UPDATE_HINT}")

    def pool(self, scenario: str) -> Baseline | None:
        """The stored pool of ``scenario`` whatever host recorded it (None: no file); for updates and listings."""
        path = self.path_for(scenario)
        if not path.exists():
            return None
        return self._parse(path, self.read_raw(path))

    def _parse(self, path: Path, data: dict[str, Any]) -> Baseline:
        version = format_version_of(data)
        if version in MIGRATIONS:
            data = self._migrate(path, data)
        elif version != BASELINE_FORMAT_VERSION:
            raise BaselineError(f"baseline file {path} has format version {version!r}; this suite reads "
                                f"{BASELINE_FORMAT_VERSION} (and migrates {sorted(MIGRATIONS)}); recreate it with "
                                f"{UPDATE_HINT}")
        try:
            baseline = Baseline.from_json(data)
            for name in baseline.metric_names():
                metric(name)
        except (KeyError, TypeError, ValueError) as exc:
            raise BaselineError(f"baseline file {path} is malformed ({exc}); restore it from git "
                                f"(`git checkout -- {path}`) or recreate it with {UPDATE_HINT}") from None
        if baseline.scenario != scenario_of(path.name):
            raise BaselineError(f"baseline file {path} holds scenario {baseline.scenario!r}, not "
                                f"{scenario_of(path.name)!r}; recreate it with {UPDATE_HINT}")
        return baseline

    def _migrate(self, path: Path, data: dict[str, Any]) -> dict[str, Any]:
        version = format_version_of(data)
        while version in MIGRATIONS:
            try:
                data = MIGRATIONS[version](data, self.machine_key)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                raise BaselineError(f"baseline file {path} (format {version}) cannot be migrated ({exc}); "
                                    f"recreate it with {UPDATE_HINT}") from None
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

    def pooled_with(self, result: RunResult, run: BaselineRun, machine: Mapping[str, Any] | None = None,
                    replace_pool: bool = False, max_runs: int = MAX_RUNS) -> Baseline:
        """The scenario's pool with ``run`` added (or a new pool of it alone with ``replace_pool``, or when the
        stored pool is another host's: ``machine``'s host, from ``MachineInfo.as_dict()``, records the pool)."""
        host = host_of(machine)
        current = None if replace_pool else self.pool(result.scenario)
        meta = {"machine": dict(machine or {})}
        if current is not None and host is not None and host.same_host(current.host):
            return replace(current.with_run(run, max_runs), metadata=MappingProxyType({**current.metadata, **meta}))
        return Baseline(result.scenario, MappingProxyType(dict(result.arm)), self.machine_key, (run,),
                        MappingProxyType(meta), host)

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

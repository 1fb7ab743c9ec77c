"""This host's A/A history: the unit effects of null A/B runs, what a group of separate engines borrows its
between-instance variance from (``judge.decide.NullSample``).

Two fresh starts of one build differ (TPOT 3 %, TTFT 5 % on the 4B shape, H200 2026-12-01), and three fresh pairs
alone estimate that spread with 2 degrees of freedom. An A/B whose two sides are the same build (``--perf-candidate``
equal to ``--perf-reference``, nothing injected) is a null comparison: its per-pair effects have a true mean of 0, and
are recorded here, per host like a pool, so that later A/Bs on this host pool them into their variance.

A file per load shape: ``<baseline dir>/<machine key>/ab-null/<shape>.json``, a folder of its own beside the pools
(``shape_key``: the model, the load
and the quota; the transport and the arm are left out, so the transport group borrows the spread measured by the
build A/B of the same shape: the offset is the engine start's, taken as the same for both launches). Entries record
the blocks per pair and the window length; only entries measured like the run being judged are pooled. A file
recorded on another host is never used (``machine.HostIdentity.same_host``); a corrupted file is a
``BaselineError`` naming it and the fix.

Every A/B grows it: a group of launches started with replicas (``--perf-ab-replicas``) adds its same-build pairs'
units (``scenarios.nulls``), whatever the builds, and a null A/B also its own. **A fresh host's first group is left
out** (``warmup_unit``): the first instance group of an A/B after the host booted, where it started within
``FRESH_HOST_S`` (8 minutes) of the boot, is stored under ``warmup`` and never pooled (on two of two fresh H200 hosts
the group 3-5 minutes after boot read 6-13 % faster than those after it, and the one 7-9 minutes after read like the
rest: docs/results/h200-issue36-2026-12-04b). The run that measured it
still pools its own units into its own verdict: they were measured beside it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine_fixtures.errors import BaselineError
from engine_fixtures.judge.decide import NullSample
from engine_fixtures.machine import HostIdentity
from engine_fixtures.store.files import atomic_write_text, file_name_of

FORMAT_VERSION = 1
MAX_ENTRIES = 40  # the newest runs kept per shape
FRESH_HOST_S = 480.0  # an A/B group started this soon after the host booted may be its warm-up (warmup_unit)
SAME_BOOT_S = 60.0  # two boot times closer than this are one boot (the kernel's boot time is derived, and wobbles)


def shape_key(scenario_key: str, quota: float | None) -> str:
    """The load shape of an engine scenario key (``.../model=M/c=16/...``): the model and load, and the quota."""
    _, sep, load = scenario_key.rpartition("/model=")
    if not sep:
        raise ValueError(f"{scenario_key!r} is not an engine scenario key (no /model=)")
    return f"model={load.removesuffix('/live')}/quota={'none' if quota is None else f'{quota:g}'}"


@dataclass(frozen=True)
class NullEntry:
    run: str
    blocks_per_unit: int
    window_s: float
    units: Mapping[str, tuple[float, ...]]  # per metric, the pair-scale null units pooled by later runs
    warmup: Mapping[str, tuple[float, ...]] = field(default_factory=dict)  # a fresh host's first group: kept aside
    boot_s: float | None = None  # the host's boot time when it was measured (the warm-up rule)
    replicas: int = 1

    def to_json(self) -> dict[str, Any]:
        out = {"run": self.run, "blocks_per_unit": self.blocks_per_unit, "window_s": self.window_s,
               "units": {k: list(v) for k, v in sorted(self.units.items())}, "replicas": self.replicas}
        if self.boot_s is not None:
            out["boot_s"] = round(self.boot_s, 1)
        if self.warmup:
            out["warmup"] = {k: list(v) for k, v in sorted(self.warmup.items())}
        return out


class NullHistory:
    """The A/A history of one machine key under ``root``, for runs of ``host``."""

    def __init__(self, root: Path, machine_key: str, host: HostIdentity | None) -> None:
        self.dir = Path(root) / machine_key / "ab-null"
        self.host = host

    def path_for(self, shape: str) -> Path:
        return self.dir / file_name_of(shape)

    def _read(self, path: Path) -> dict[str, Any] | None:
        if not path.exists():
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise BaselineError(f"A/A history {path} is corrupted ({exc}); delete it (the next null A/B records a "
                                "new one) or restore it from where you keep baselines") from None
        if not isinstance(data, dict) or data.get("format_version") != FORMAT_VERSION:
            raise BaselineError(f"A/A history {path} is not a format_version {FORMAT_VERSION} file; delete it (the "
                                "next null A/B records a new one)")
        return data

    def _mine(self, data: Mapping[str, Any]) -> bool:
        host = data.get("host")
        return self.host is not None and host is not None and self.host.same_host(HostIdentity.from_json(host))

    def sample(self, shape: str, metric_name: str, blocks_per_unit: int, window_s: float) -> NullSample | None:
        """The null units of ``metric_name`` measured on this host like this run; None when there are none."""
        path = self.path_for(shape)
        data = self._read(path)
        if data is None or not self._mine(data):
            return None
        effects: list[float] = []
        runs = 0
        for e in data.get("entries", []):
            if e.get("blocks_per_unit") == blocks_per_unit and math.isclose(e.get("window_s", -1), window_s):
                got = [float(x) for x in e.get("units", {}).get(metric_name, [])]
                runs += bool(got)
                effects += got
        if not effects:
            return None
        return NullSample.of(effects, f"this host's A/A history ({runs} null run(s), {path})")

    def warmup_unit(self, started_s: float, boot_s: float) -> bool:
        """Whether an A/B's first instance group, started at ``started_s`` (epoch seconds) on a host booted at
        ``boot_s``, is the fresh host's warm-up: it started within ``FRESH_HOST_S`` of the boot and no entry of any
        shape of this history was measured since that boot."""
        if started_s - boot_s > FRESH_HOST_S:
            return False
        for path in sorted(self.dir.glob("*.json")) if self.dir.is_dir() else ():
            data = self._read(path)
            if data is not None and self._mine(data) and any(
                    abs(float(e.get("boot_s", -1e12)) - boot_s) < SAME_BOOT_S for e in data.get("entries", [])):
                return False
        return True

    def record(self, shape: str, entry: NullEntry) -> Path:
        """Add one null A/B run's unit effects (another host's file is replaced: it never judged this host)."""
        if self.host is None:
            raise BaselineError("an A/A history needs this host's identity; none was collected")
        path = self.path_for(shape)
        data = self._read(path)
        entries = list(data.get("entries", [])) if data is not None and self._mine(data) else []
        entries = [*entries, entry.to_json()][-MAX_ENTRIES:]
        body = {"format_version": FORMAT_VERSION, "shape": shape, "host": self.host.to_json(), "entries": entries}
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(body, indent=1, sort_keys=True) + "\n")
        return path


def _finite(units: Mapping[str, Sequence[float]]) -> dict[str, tuple[float, ...]]:
    """The finite values of each metric, rounded; a metric left with none is left out."""
    kept = {k: tuple(round(float(x), 6) for x in v if math.isfinite(x)) for k, v in units.items()}
    return {k: v for k, v in kept.items() if v}


def null_entry(run: str, blocks_per_unit: int, window_s: float, units: Mapping[str, Sequence[float]], *,
               warmup: Mapping[str, Sequence[float]] | None = None, replicas: int = 1,
               boot_s: float | None = None) -> NullEntry:
    """One run's entry: ``units`` pooled by later runs, ``warmup`` (a fresh host's first group) kept aside."""
    return NullEntry(run, blocks_per_unit, window_s, _finite(units), _finite(warmup or {}), boot_s, replicas)

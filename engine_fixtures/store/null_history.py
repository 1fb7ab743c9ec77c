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
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine_fixtures.errors import BaselineError
from engine_fixtures.judge.decide import NullSample
from engine_fixtures.machine import HostIdentity
from engine_fixtures.store.files import atomic_write_text, file_name_of

FORMAT_VERSION = 1
MAX_ENTRIES = 40  # the newest runs kept per shape


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
    units: Mapping[str, tuple[float, ...]]  # per metric, one effect per instance group

    def to_json(self) -> dict[str, Any]:
        return {"run": self.run, "blocks_per_unit": self.blocks_per_unit, "window_s": self.window_s,
                "units": {k: list(v) for k, v in sorted(self.units.items())}}


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


def null_entry(run: str, blocks_per_unit: int, window_s: float,
               units: Mapping[str, Sequence[float]]) -> NullEntry:
    return NullEntry(run, blocks_per_unit, window_s,
                     {k: tuple(round(float(x), 6) for x in v if math.isfinite(x)) for k, v in units.items()})

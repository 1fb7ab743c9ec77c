"""A profile kept beside its baseline pool (history mode): ``<pool file>.profile``, e.g.
``baselines/<machine key>/mech%2Fcopy=buffer%2F...json`` -> ``...json.profile`` (not ``*.json``, so the pool
listing never takes it for a scenario).

The stored profile is the ``RoleProfiles`` of one clean run of the pooled build, written atomically when a run
that was profiled is added to the pool (``save_beside``); ``load_beside`` returns None where none is kept yet, and
a corrupted file is a ``BaselineError`` that names it and the fix.
"""

from __future__ import annotations

import json
from pathlib import Path

from engine_fixtures.errors import BaselineError
from engine_fixtures.profile.model import RoleProfiles
from engine_fixtures.store.files import atomic_write_text

FORMAT = 1


def profile_path(pool_path: Path) -> Path:
    return pool_path.with_name(pool_path.name + ".profile")


def save_beside(pool_path: Path, profiles: RoleProfiles) -> Path:
    path = profile_path(pool_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps({"format": FORMAT, **profiles.to_json()}, sort_keys=True) + "\n")
    return path


def load_beside(pool_path: Path) -> RoleProfiles | None:
    path = profile_path(pool_path)
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") != FORMAT:
            raise ValueError(f"format {data.get('format')!r}, expected {FORMAT}")
        return RoleProfiles.from_json(data)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BaselineError(f"stored profile {path} is unreadable ({exc}); restore it from git or delete it (the "
                            "next profiled run added to the pool writes a new one)") from exc

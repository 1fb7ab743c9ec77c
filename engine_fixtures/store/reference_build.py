"""The stored reference build: the last good SGLang build a runner keeps beside its pools, so a nightly can judge
today's build against it alive together (the A/B of two builds) instead of against numbers taken minutes or days
earlier (runs minutes apart differed by 9 % in req/s and 13 % in TTFT on one H200, engines alive together by 2-4 %).

``<baseline dir>/<machine key>/reference-build/``: ``manifest.json`` and the kept files (a copy of a venv or a site
directory, hard-linked where the file system allows, or a wheel). ``perf-baseline reference promote BUILD``
(``cli_reference``) makes ``BUILD`` the reference: it copies the build first, writes the manifest, and only then
swaps it in for the previous one, so a failed promotion keeps the old reference. ``--perf-reference stored`` runs the
A/B against it (``session.preflight`` resolves it before anything starts).

What can be kept: ``venv:DIR``, ``site:DIR``, ``wheel:FILE.whl``, each with ``patch:``/``env:`` parts kept as
written. An interpreter (``python:PATH``) or ``installed`` cannot be: they change with the next install; the error
says to promote the venv, the site directory or the wheel instead. A missing or corrupted manifest, or kept files
that are gone, is a ``BaselineError`` naming the directory and the fix.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from engine_fixtures.engine.build import EngineBuild, parse_reference
from engine_fixtures.errors import BaselineError, ConfigError
from engine_fixtures.store.files import atomic_write_text

REFERENCE_DIR = "reference-build"
MANIFEST = "manifest.json"
FORMAT_VERSION = 1
KEPT = ("venv", "site", "wheel")  # the build parts whose files are copied
PROMOTE = f"perf-baseline reference promote BUILD ({', '.join(f'{k}:' for k in KEPT)})"


@dataclass(frozen=True)
class StoredBuild:
    spec: str  # the --perf-reference form that runs the kept copy
    source: str  # the build as promoted
    promoted_at: str  # UTC, ISO 8601
    sglang_version: str | None
    note: str = ""  # why it was promoted (the command's --reason)

    @property
    def label(self) -> str:
        return f"stored:{self.source} (promoted {self.promoted_at})"


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)  # pip replaces files rather than writing into them: a hard link stays the kept version
    except OSError:
        shutil.copy2(src, dst)


class ReferenceStore:
    """The stored reference build of one machine key under ``root``."""

    def __init__(self, root: Path, machine_key: str) -> None:
        self.dir = Path(root) / machine_key / REFERENCE_DIR

    def kept(self) -> bool:
        """Whether a reference build is kept here (its manifest exists; ``load`` reads and checks it)."""
        return (self.dir / MANIFEST).exists()

    def load(self) -> StoredBuild:
        path = self.dir / MANIFEST
        if not path.exists():
            raise BaselineError(f"no reference build is stored in {self.dir}; promote the last good build first: "
                                f"{PROMOTE}")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("format_version") != FORMAT_VERSION:
                raise ValueError(f"format_version {data.get('format_version')!r}, not {FORMAT_VERSION}")
            stored = StoredBuild(**{k: data[k] for k in ("spec", "source", "promoted_at", "sglang_version")},
                                 note=str(data.get("note", "")))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise BaselineError(f"the stored reference build's manifest {path} is unreadable ({exc}); promote the "
                                f"build again: {PROMOTE}") from None
        return stored

    def build(self) -> EngineBuild:
        """The stored build, ready for ``--perf-reference`` (its kept files checked)."""
        stored = self.load()
        try:
            build = parse_reference(stored.spec, option="the stored reference build")
        except ConfigError as exc:
            raise BaselineError(f"the stored reference build in {self.dir} is incomplete ({exc}); promote the build "
                                f"again: {PROMOTE}") from None
        return EngineBuild(stored.label, build.python, build.pythonpath, build.wheel, build.env)

    def promote(self, text: str, note: str = "") -> StoredBuild:
        """Keep a copy of the build ``text`` as this machine key's reference (module docstring)."""
        parse_reference(text, option="perf-baseline reference promote")  # paths checked, typos named
        parts = [p.strip() for p in text.split("+") if p.strip()]
        if not any(p.partition(":")[0] in KEPT for p in parts) or any(p.startswith("python:") for p in parts):
            raise BaselineError(f"{text!r} names no files the runner can keep (an interpreter, or `installed`, "
                                "changes with the next install); promote the build's venv (venv:DIR), its unpacked "
                                "site directory (site:DIR) or its wheel (wheel:FILE.whl)")
        self.dir.parent.mkdir(parents=True, exist_ok=True)
        staging = self.dir.with_name(f"{REFERENCE_DIR}.new-{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        try:
            spec = "+".join(self._keep(p, staging, i) for i, p in enumerate(parts))
            version = parse_reference(spec, option="the kept copy").sglang_version(staging / "probe")
            stored = StoredBuild(spec.replace(str(staging), str(self.dir)), text,
                                 time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), version, note)
            body: dict[str, Any] = {"format_version": FORMAT_VERSION, **asdict(stored)}
            atomic_write_text(staging / MANIFEST, json.dumps(body, indent=1, sort_keys=True) + "\n")
            shutil.rmtree(staging / "probe", ignore_errors=True)
            old = self.dir.with_name(f"{REFERENCE_DIR}.old-{os.getpid()}")
            if self.dir.exists():
                self.dir.rename(old)
            staging.rename(self.dir)
            shutil.rmtree(old, ignore_errors=True)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return stored

    @staticmethod
    def _keep(part: str, staging: Path, index: int) -> str:
        """Copy the files of one build part into ``staging``; the part as it names the copy."""
        kind, _, value = part.partition(":")
        if kind not in KEPT:
            return part
        src = Path(value).resolve()
        if kind == "wheel":
            dst = staging / src.name
            _link_or_copy(str(src), str(dst))
        else:
            dst = staging / f"{kind}-{index}"
            shutil.copytree(src, dst, symlinks=True, copy_function=_link_or_copy)
        return f"{kind}:{dst}"

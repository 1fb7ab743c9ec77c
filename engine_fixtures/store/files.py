"""File mechanics shared by the stores: scenario file names, sorted JSON, atomic durable writes.

File names: a scenario id such as ``mech/copy=torch/quota=0.5`` contains ``/``; its file name is
``urllib.parse.quote(scenario, safe="=,+-_.")`` (``/`` -> ``%2F``, ``%`` -> ``%25``, spaces ``%20``) plus
``.json``; ``scenario_of(file_name)`` is the exact inverse. Ids that would start with ``.`` get it escaped as
``%2E`` so no baseline is ever a hidden or temp file.

Writes are atomic: temp file in the same directory, fsync, ``os.replace``, fsync of the directory. A writer
killed at any moment leaves the old or the new file, never a torn one. The temp file is
``.<name>.<owner token>.<random>.tmp`` (``isolation.owner.temp_prefix``): listings ignore it, and the sweep of
a later run (``isolation.sweep``) tells from the token whose half-written file it is.

``place_problem(path, kind)``: why a directory (or a file) cannot be made or written at ``path``, creating nothing
(also: a name that is not UTF-8, a path too long for what is written in it, a symbolic link that leads nowhere);
the one check behind the start-up checks (``session.preflight``) and the SQLite history's (``history_db``).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import urllib.parse
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from engine_fixtures.errors import BaselineError
from engine_fixtures.isolation import owner

_SAFE = "=,+-_."


def file_name_of(scenario: str) -> str:
    """Filesystem-safe, reversible file name of a scenario id."""
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


PATH_ROOM = 96  # bytes the suite adds to a directory it is given: the longest name it writes there (a temp file)


def printable(path: Path | str) -> str:
    """``path`` as text a message can hold: bytes that are not UTF-8 as ``\\xff`` (never a lone surrogate)."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def place_problem(path: Path, kind: str = "directory", writable: bool = True) -> str | None:
    """Why ``path`` cannot be a ``kind`` ("directory" or "file") this process writes (None: it can). A missing one
    is fine where its nearest existing ancestor is a directory this user may create it in. A name that is not UTF-8
    is refused (the results JSON, the run history and the reports name it as text: it could not be stored), and so
    is one too long for the files the suite writes in it. Creates nothing."""
    path = Path(path)
    shown = printable(path)
    if shown != str(path):
        return (f"{shown} holds bytes that are not UTF-8; rename it or pass another path (the results and the run "
                "history name it as text)")
    size, most = len(os.fsencode(path.absolute())), os.pathconf("/", "PC_PATH_MAX")
    if size + PATH_ROOM >= most:
        return (f"{shown[:60]}... is too long: {size} bytes with its parents, and the files written in it need "
                f"{PATH_ROOM} more of the system's {most}")
    try:
        return _place_problem(path, kind, writable)
    except OSError as exc:  # a name longer than the file system allows, a directory that cannot be searched
        return f"{shown[:60]}{'...' if len(shown) > 60 else ''} cannot be used: {exc.strerror}"


def _place_problem(path: Path, kind: str, writable: bool) -> str | None:
    if path.exists() and not (path.is_dir() if kind == "directory" else path.is_file()):
        return f"{path} exists and is not a {kind}"
    probe = path
    while not probe.exists() and not probe.is_symlink() and probe != probe.parent:
        probe = probe.parent
    if probe.is_symlink() and not probe.exists():
        where = "" if probe == path else f" cannot be created: {probe}"
        return f"{path}{where} is a symbolic link that leads nowhere (a loop, or its target is missing)"
    if probe != path and not probe.is_dir():
        return f"{path} cannot be created: {probe} is not a directory"
    if writable and not os.access(probe, os.W_OK | (os.X_OK if probe.is_dir() else 0)):
        return f"{path} is not writable" if probe == path else f"{path} cannot be created: {probe} is not writable"
    return None


def dumps(data: Mapping[str, Any]) -> str:
    return json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n"


@contextlib.contextmanager
def atomic_writer(path: Path) -> Iterator[IO[str]]:
    """A text file that replaces ``path`` atomically and durably when the block ends without an exception
    (temp + fsync + rename + dir fsync); on an exception the temp file is removed and ``path`` is untouched."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=owner.temp_prefix(path.name), suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            yield fh
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


def atomic_write_text(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically and durably (``atomic_writer``)."""
    with atomic_writer(path) as fh:
        fh.write(text)


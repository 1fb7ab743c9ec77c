"""Profiles as data: collapsed stacks of one role over one window, and CPU-seconds per request by function.

A ``Profile`` holds py-spy's collapsed stacks (root first, one count per stack) of every process of one role, the
sampling rate and the requests completed in the window. py-spy samples the stacks of the role's Python threads
``rate`` times a second; without ``--idle`` (the default, which this suite keeps) samples of idle threads (blocked
in a system call, waiting on a lock or a socket) are dropped, so every kept sample is ~1/rate seconds of a thread
running (or runnable). ``samples / rate / requests`` is therefore the role's Python CPU-seconds per request. Native
threads without a Python frame (e.g. PyTorch's OpenMP workers) are not sampled: their cost shows as the Python
frame that waits on them (``copy_`` in the calling function), not as their own spinning. Under a binding CPU quota
a thread that is runnable but throttled still reads as running, so there the numbers are time spent in a function
per request while the role wanted the CPU (an injected 6 ms spin read as ~8.5 ms/request at quota 0.5), not pure
CPU time.

Frames carry the line a sample was on (py-spy without ``--function``). A function is keyed by its name and its
**module path inside the build** (``sglang/srt/managers/scheduler.py``), never by the absolute file: two builds of an
A/B necessarily sit at different paths (a venv's site-packages, a kept site dir, an unpacked wheel), and keyed by
path every function of the candidate would read as new against the reference (issue 52: ``tensor_hash 0.00 ->
6.25 ms/req`` on a decode-path slowdown that never touched it). ``module_path`` strips the directory the file's
top-level package sits in (found from the files when the profile is recorded: ``record.package_root``,
``Frame.module``), else the last ``site-packages/`` or ``dist-packages/``, else the standard library's
``lib/pythonX.Y/``. Per function (``(function, module)``): *self*
counts the samples whose leaf is the function, *total* the samples whose stack contains it (once per stack, so a
recursive function is not counted twice); its hottest line is kept, so a report names the line of the call where
the time went (e.g. the ``copy_`` inside ``ShmPointerMMData.__init__``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

Stack = tuple["Frame", ...]
FuncKey = tuple[str, str]  # (function, module path inside the build)
_STDLIB = re.compile(r"/lib/python3\.\d+/(?P<tail>.+)$")


def module_path(file: str, roots: Sequence[str] = ()) -> str:
    """``file`` as its build imports it, wherever the build is installed: relative to the longest of ``roots`` (the
    directories its top-level package may sit in) that holds it, else after the last ``site-packages/`` or
    ``dist-packages/``, else after the standard library's ``lib/pythonX.Y/``; a file under none is kept whole."""
    for root in sorted((r.rstrip("/") + "/" for r in roots if r.strip("/")), key=len, reverse=True):
        if file.startswith(root):
            return file[len(root):]
    for marker in ("site-packages/", "dist-packages/"):
        if marker in file:
            return file.rsplit(marker, 1)[1]
    m = _STDLIB.search(file)
    if m:
        return m["tail"]
    _, suite, tail = file.rpartition("/engine_fixtures/")  # the suite's own package, from a checkout
    return f"engine_fixtures/{tail}" if suite else file


@dataclass(frozen=True, order=True)
class Frame:
    function: str
    file: str  # as sampled: absolute
    line: int
    module: str = ""  # the module path inside the build, where the recorder found the file's package (``in_build``)

    def in_build(self, roots: Sequence[str]) -> Frame:
        """This frame with its module path taken against ``roots`` (where its top-level package sits)."""
        return replace(self, module=module_path(self.file, roots))

    @property
    def short_file(self) -> str:
        """The file as its build imports it (``.../site-packages/torch/x.py`` -> ``torch/x.py``)."""
        return self.module or module_path(self.file)

    @property
    def key(self) -> FuncKey:
        """The function, whatever line a sample was on and wherever its build is installed."""
        return (self.function, self.short_file)

    @property
    def where(self) -> str:
        return f"{self.short_file}:{self.line}"

    def __str__(self) -> str:
        return f"{self.function} ({self.where})"


@dataclass(frozen=True)
class FunctionCost:
    frame: Frame
    self_samples: int
    total_samples: int


@dataclass(frozen=True)
class Profile:
    """One role over one window: collapsed stacks (summed over the role's processes), rate and requests."""

    role: str
    rate_hz: float
    requests: int
    seconds: float
    stacks: Mapping[Stack, int] = field(default_factory=lambda: MappingProxyType({}))
    pids: tuple[int, ...] = ()
    errors: int = 0  # py-spy's own count of samples it could not take
    note: str = ""  # why a profile is empty (py-spy refused), else ""

    @property
    def samples(self) -> int:
        return sum(self.stacks.values())

    def cpu_s(self, samples: float) -> float:
        """Samples as CPU-seconds per request (samples / rate / requests)."""
        return samples / self.rate_hz / self.requests if self.requests and self.rate_hz else 0.0

    @property
    def cpu_s_per_request(self) -> float:
        return self.cpu_s(self.samples)

    def functions(self) -> dict[FuncKey, FunctionCost]:
        """Per function (``(function, file)``): self and total samples; its ``frame`` carries the hottest line
        (the line most self samples were on, else most total samples), e.g. the line of the copy it calls."""
        self_n: dict[FuncKey, int] = {}
        total_n: dict[FuncKey, int] = {}
        lines: dict[Frame, list[int]] = {}
        for stack, n in self.stacks.items():
            if not stack:
                continue
            leaf = stack[-1]
            self_n[leaf.key] = self_n.get(leaf.key, 0) + n
            lines.setdefault(leaf, [0, 0])[0] += n
            for frame in set(stack):
                lines.setdefault(frame, [0, 0])[1] += n
            for key in {f.key for f in stack}:
                total_n[key] = total_n.get(key, 0) + n
        hot: dict[FuncKey, Frame] = {}
        for frame, _counts in sorted(lines.items(), key=lambda kv: (-kv[1][0], -kv[1][1], kv[0])):
            hot.setdefault(frame.key, frame)
        return {k: FunctionCost(hot[k], self_n.get(k, 0), t) for k, t in total_n.items()}

    def to_json(self) -> dict[str, Any]:
        return {"role": self.role, "rate_hz": self.rate_hz, "requests": self.requests, "seconds": self.seconds,
                "pids": list(self.pids), "errors": self.errors, "note": self.note,
                "stacks": [[[[f.function, f.file, f.line, *([f.module] if f.module else [])] for f in s], n]
                           for s, n in self.stacks.items()]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Profile:
        stacks = {tuple(Frame(str(f[0]), str(f[1]), int(f[2]), str(f[3]) if len(f) > 3 else "") for f in s): int(n)
                  for s, n in data["stacks"]}
        return cls(str(data["role"]), float(data["rate_hz"]), int(data["requests"]), float(data["seconds"]),
                   MappingProxyType(stacks), tuple(int(p) for p in data.get("pids", ())), int(data.get("errors", 0)),
                   str(data.get("note", "")))


@dataclass(frozen=True)
class RoleProfiles:
    """Every profiled role of one build (or arm) in one dedicated window; ``notes``: what could not be profiled."""

    label: str
    profiles: Mapping[str, Profile] = field(default_factory=lambda: MappingProxyType({}))
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "notes": list(self.notes),
                "profiles": {r: p.to_json() for r, p in self.profiles.items()}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RoleProfiles:
        return cls(str(data["label"]), MappingProxyType({r: Profile.from_json(p)
                                                         for r, p in data["profiles"].items()}),
                   tuple(data.get("notes", ())))

"""This process's live arm: ``(seq, LiveArm)``, switched from ``<PERF_ARMS_PROOF_DIR>/arms.json`` while it runs.

- ``launch_arm(environ)``: the arm an engine starts with (seq 0), from ``PERF_ARMS_COPY``, ``PERF_ARMS_IPC_CACHE``
  and ``PERF_ARMS_PATCH``; the fixture computes it from the same variables, so both sides agree on seq 0.
- ``write_arm_file(directory, arm, seq)``: the fixture's side (atomic: tmp + rename).
- ``LiveState``: what the installed hooks read at each call. A hook runs its call inside ``entered()``, which hands
  it the live ``(seq, arm)``; ``refresh(directory)`` (the proof thread, before it answers a flush request) reads the
  file and ``switch``-es to a new seq only between calls: it waits (bounded) until no call is in flight and holds
  new calls back meanwhile, so every call runs wholly under one seq and is counted under it. Appliers registered by
  the hooks (``add_applier``) run at each switch and return what this process cannot do for the arm (an implementation
  that is not there, a layout it does not know): ``arm_errors`` in the proof, never a silent no-op.
This module imports no SGLang and no torch.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from engine_fixtures.sglang_plugin.patches import PATCH_ENV, parse
from engine_fixtures.transport.live import ARMS_FILE, LiveArm

SWITCH_TIMEOUT_S = 5.0  # the longest a switch waits for calls of the old arm to finish
Applier = Callable[[LiveArm], list[str]]


def launch_arm(environ: Mapping[str, str]) -> LiveArm:
    """The launch-time arm from an engine's environment; ValueError names a bad value."""
    patches = parse(environ.get(PATCH_ENV, ""))
    return LiveArm(copy=environ.get("PERF_ARMS_COPY") or "stock",
                   ipc_cache=environ.get("PERF_ARMS_IPC_CACHE") or "stock", threads=None,
                   patches=tuple(patches.items()))


def write_arm_file(directory: Path, arm: LiveArm, seq: int) -> Path:
    """Write ``arm`` under ``seq`` to ``<directory>/arms.json`` atomically (a reader never sees half a file)."""
    target = Path(directory) / ARMS_FILE
    tmp = target.with_name(f".{ARMS_FILE}.{os.getpid()}.tmp")
    tmp.write_text(arm.to_json(seq))
    os.replace(tmp, target)
    return target


class LiveState:
    """The live ``(seq, arm)`` of one process, the gate the hooks' calls pass through, and the appliers."""

    def __init__(self, launch: LiveArm) -> None:
        self.launch = launch
        self.seq = 0
        self.arm = launch
        self.arm_errors: list[str] = []
        self._appliers: list[Applier] = []
        self._cond = threading.Condition()
        self._inflight = 0
        self._switching = False
        self._local = threading.local()
        self._file_error: tuple[str, str] | None = None  # (file text, why it was refused)

    # ------------------------------------------------------------------ the hooks' side
    @contextlib.contextmanager
    def entered(self) -> Iterator[tuple[int, LiveArm]]:
        """The live ``(seq, arm)`` for one call; no switch happens until the call leaves (re-entrant per thread)."""
        depth = getattr(self._local, "depth", 0)
        with self._cond:
            while self._switching and depth == 0:
                self._cond.wait()
            self._inflight += 1
            seq, arm = self.seq, self.arm
        self._local.depth = depth + 1
        try:
            yield seq, arm
        finally:
            self._local.depth = depth
            with self._cond:
                self._inflight -= 1
                self._cond.notify_all()

    def add_applier(self, applier: Applier) -> None:
        """Register ``applier`` and run it on the arm applied now (its complaints go into ``arm_errors``)."""
        with self._cond:
            self._appliers.append(applier)
            self.arm_errors += self._run(applier, self.arm)

    # ------------------------------------------------------------------ the proof thread's side
    def switch(self, seq: int, arm: LiveArm, timeout_s: float = SWITCH_TIMEOUT_S) -> None:
        """Apply ``arm`` as ``seq`` between calls (see the module docstring)."""
        with self._cond:
            self._switching = True
            try:
                drained = self._cond.wait_for(lambda: self._inflight == 0, timeout_s)
                errors = [] if drained else [
                    f"arm seq {seq}: {self._inflight} call(s) of seq {self.seq} still ran after {timeout_s:g} s, "
                    "so the switch could not wait for them"]
                for applier in self._appliers:
                    errors += self._run(applier, arm)
                self.seq, self.arm, self.arm_errors = seq, arm, errors
            finally:
                self._switching = False
                self._cond.notify_all()

    def refresh(self, directory: Path) -> None:
        """Switch to the arm in ``<directory>/arms.json`` if its seq is not the one applied now."""
        try:
            text = (Path(directory) / ARMS_FILE).read_text()
        except OSError:
            return  # no switch requested yet (or the fixture's directory went away)
        try:
            seq, arm = LiveArm.from_json(text)
        except ValueError as exc:
            with self._cond:
                if self._file_error is None or self._file_error[0] != text:
                    self._file_error = (text, f"{ARMS_FILE} refused, arm seq {self.seq} kept: {exc}")
            return
        with self._cond:
            self._file_error = None
            if seq == self.seq:
                return
        self.switch(seq, arm)

    def snapshot(self) -> dict[str, Any]:
        with self._cond:
            errors = list(self.arm_errors) + ([self._file_error[1]] if self._file_error else [])
            return {"arm_seq": self.seq, "arm_now": self.arm.to_dict(), "arm_errors": errors}

    @staticmethod
    def _run(applier: Applier, arm: LiveArm) -> list[str]:
        try:
            return list(applier(arm))
        except Exception as exc:  # never raise into SGLang; the proof carries it
            return [f"applying {arm.label} failed: {exc!r}"]

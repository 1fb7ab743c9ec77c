"""Per-process proof file: counters of what really ran, written atomically as JSON.

One file per process, ``<PERF_ARMS_PROOF_DIR>/proof-<pid>.json``. It is rewritten every ``every`` events (``add``;
``tally`` and ``tally_many``, for the hooks on the engine's hot path, count without writing),
every ``interval_s`` seconds by a daemon thread (an ``Event.wait`` loop), at exit, and on request: the
fixture writes a number into ``<dir>/flush-request`` and every live process answers by writing a proof
whose ``flush_seq`` is at least that number. Before it answers, the thread applies ``<dir>/arms.json``
(``arm_state.LiveState.refresh``; the request is read first, and the fixture writes the arm before the request),
so a proof that answers a flush reports the live arm written before it (``arm_seq``, ``arm_now``, ``arm_errors``).
The thread also retries the hook installs that wait for SGLang to import their module itself (``deferred``).
This module must stay importable without SGLang or torch.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from engine_fixtures.sglang_plugin.arm_state import LiveState
from engine_fixtures.transport.live import LiveArm

FLUSH_REQUEST = "flush-request"
# How often the proof thread answers a flush and applies arms.json: a live-arm visit waits for three flushes (the
# switch and the segment's two proofs), so at 0.5 s this cost about 0.75 s per visit; a poll costs two small file
# reads and one small write.
PROOF_INTERVAL_S = 0.1


def process_title() -> str:
    """The process title (SGLang's ``sglang::scheduler...``) or the command line of the main process."""
    try:
        with open(f"/proc/{os.getpid()}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return " ".join(sys.argv)
    return raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()


def role_of(title: str) -> str:
    """``scheduler``, ``detokenizer``, ``tokenizer_worker`` or ``http_server`` (the untitled root)."""
    for role in ("scheduler", "detokenizer", "tokenizer_worker", "data_parallel_controller"):
        if title.startswith("sglang::" + role):
            return role
    return "http_server"


def _patch_magnitudes() -> dict[str, float]:
    from engine_fixtures.sglang_plugin.patches import magnitudes

    return magnitudes()


class Recorder:
    """Thread-safe counters plus the periodic writer for one process."""

    def __init__(self, directory: Path, requested: dict[str, str], every: int = 32,
                 interval_s: float = PROOF_INTERVAL_S, live: LiveState | None = None):
        self.directory = directory
        self.live = live if live is not None else LiveState(LiveArm())
        self.path = directory / f"proof-{os.getpid()}.json"
        self.requested = dict(requested)
        self.every = every
        self.interval_s = interval_s
        self.installed: dict[str, str] = {}
        self.errors: list[str] = []
        self.counters: dict[str, float] = {}
        self.sglang_version: str | None = None
        self._lock = threading.Lock()
        self._events = 0
        self._flush_seq = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.deferred: list[Callable[[], bool]] = []  # hook installs the proof thread retries until they say done

    def add(self, name: str, amount: float = 1.0) -> None:
        self.add_many({name: amount})

    def add_many(self, amounts: Mapping[str, float]) -> None:
        """Add several counters as one event (one call of a hook)."""
        with self._lock:
            for name, amount in amounts.items():
                self.counters[name] = self.counters.get(name, 0.0) + amount
            self._events += 1
            due = self._events % self.every == 0
        if due:
            self.write()

    def tally(self, name: str) -> None:
        """Add 1 to ``name`` and nothing else: not an event, so it never triggers a write. For hooks on the engine's
        hot path (a scheduler's every batch), which must cost a dict increment and no I/O; the proof thread writes
        every ``interval_s`` and at each flush request, which is when the counts are read."""
        self.tally_many({name: 1.0})

    def tally_many(self, amounts: Mapping[str, float]) -> None:
        """Add several counters at once, as ``tally`` does: no event, no write (for the hot path)."""
        with self._lock:
            for name, amount in amounts.items():
                self.counters[name] = self.counters.get(name, 0.0) + amount

    def snapshot(self) -> dict[str, Any]:
        title = process_title()
        with self._lock:  # the arm read under the lock that orders flush_seq after the arm it answers with
            return {
                **self.live.snapshot(),
                "pid": os.getpid(),
                "ppid": os.getppid(),
                "title": title,
                "role": role_of(title),
                "sglang_version": self.sglang_version,
                "requested": dict(self.requested),
                "installed": dict(self.installed),
                "counters": dict(self.counters),
                "patch_ms_now": _patch_magnitudes(),
                "errors": list(self.errors),
                "flush_seq": self._flush_seq,
                "written_at": time.time(),
            }

    def write(self) -> None:
        """Atomic rewrite (tmp + rename), so a reader never sees half a file."""
        data = json.dumps(self.snapshot(), sort_keys=True)
        tmp = self.path.with_suffix(f".tmp{threading.get_ident()}")
        try:
            tmp.write_text(data)
            os.replace(tmp, self.path)
        except OSError:
            pass  # the directory went away with the fixture; nothing left to prove to

    def _requested_seq(self) -> int:
        try:
            return int((self.directory / FLUSH_REQUEST).read_text().strip() or 0)
        except (OSError, ValueError):
            return 0

    def _install_deferred(self) -> None:
        left = []
        for attempt in self.deferred:
            try:
                if not attempt():
                    left.append(attempt)
            except Exception as exc:  # never raise into SGLang; the proof carries it
                self.errors.append(f"deferred install failed: {exc!r}")
        self.deferred = left

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            seq = self._requested_seq()  # first: the arm written before this request is applied below
            self._install_deferred()
            self.live.refresh(self.directory)
            with self._lock:
                self._flush_seq = max(self._flush_seq, seq)
            self.write()

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.write()
        self._thread = threading.Thread(target=self._loop, name="perf-arms-proof", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            self._flush_seq = max(self._flush_seq, self._requested_seq())
        self.write()

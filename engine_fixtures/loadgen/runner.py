"""``run_load``: the client in its own process (``engine_fixtures.loadgen.child``), optionally pinned to
CPUs, its result framed over a pipe. The process is ``isolation.process.Supervised`` (pipes, the curated
child environment, this process's session and cgroup) and always stopped, also on failure and timeout."""

from __future__ import annotations

import importlib.util
import math
import os
import pickle
import select
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from engine_fixtures.errors import ConfigError, MeasurementError, ProcessCrashed
from engine_fixtures.isolation import owner
from engine_fixtures.isolation.process import CHILD_PASSTHROUGH, LaunchSpec, Supervised, curated_env
from engine_fixtures.loadgen.load_report import LoadReport, build_report
from engine_fixtures.loadgen.progress import ProgressDisplay
from engine_fixtures.loadgen.workload import WorkloadSpec

CHAT_PATH = "/v1/chat/completions"
_STOP_TIMEOUT_S = 10.0
_HEADER = 9


def endpoint_url(url: str) -> str:
    """``http://host:port`` (or with a trailing ``/``) -> ``.../v1/chat/completions``; a URL that already
    has a path or query is used as is."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"url={url!r}: expected http://host:port (the server's base URL)")
    if parts.path in ("", "/") and not parts.query:
        return url.rstrip("/") + CHAT_PATH
    return url


def check_cpus(cpus: Iterable[int] | None) -> tuple[int, ...] | None:
    if cpus is None:
        return None
    chosen = tuple(sorted(set(cpus)))
    allowed = os.sched_getaffinity(0)
    if not chosen or not set(chosen) <= allowed:
        raise ConfigError(f"cpus={chosen!r}: must be a non-empty subset of this process's CPUs {sorted(allowed)}")
    return chosen


def default_deadline_s(spec: WorkloadSpec) -> float:
    """Upper bound on a healthy run: every request wave may take the full request timeout."""
    if spec.concurrency is not None:
        return 60.0 + spec.request_timeout_s * math.ceil(spec.total_requests / spec.concurrency)
    assert spec.request_rate is not None
    return 60.0 + 2 * spec.total_requests / spec.request_rate + spec.request_timeout_s


class _Progress:
    value = 0


def run_load(
    url: str,
    spec: WorkloadSpec,
    *,
    cpus: Iterable[int] | None = None,
    progress: bool = False,
    deadline_s: float | None = None,
) -> LoadReport:
    """Run ``spec`` against the server at ``url`` from a fresh process (pinned to ``cpus`` if given; it
    inherits this process's cgroup, never an engine's). Images and bodies are built there before its
    clock starts. Raises ``LoadError`` if any request failed, ``MeasurementError`` on zero completed
    requests or a run past ``deadline_s``, ``ProcessCrashed`` if the load process died."""
    endpoint = endpoint_url(url)
    if spec.http_client == "fast" and not endpoint.startswith("http://"):
        raise ConfigError(f"url={url!r}: http_client='fast' speaks plain http:// only; use http_client='aiohttp'")
    if spec.http_client == "fast" and importlib.util.find_spec("httptools") is None:
        # Checked here, not in the load process, so the error names the fix instead of a child traceback
        # (seen on the H200 image, whose Python lacks httptools unless it is carried as a wheel).
        raise ConfigError("http_client='fast' needs httptools, which is not installed: `pip install "
                          "'httptools>=0.6,<1'` (a declared dependency of this suite), or use http_client='aiohttp'")
    chosen = check_cpus(cpus)
    deadline = default_deadline_s(spec) if deadline_s is None else deadline_s
    counter = _Progress()
    with owner.temp_dir("load") as tmp:
        launch = LaunchSpec(
            (sys.executable, "-m", "engine_fixtures.loadgen.child"),
            Path(tmp, "load.log"),
            curated_env(passthrough=CHILD_PASSTHROUGH),
            name="load process",
            stdio="pipes",
            new_session=False,
        )
        child = Supervised.start(launch)
        proc = child.proc
        try:
            assert proc.stdin is not None
            assert proc.stdout is not None
            proc.stdin.write(pickle.dumps((endpoint, spec, chosen, progress)))
            proc.stdin.close()
            with ProgressDisplay(counter, spec.total_requests, f"load {spec.describe()}", enabled=progress):
                kind, payload = FrameReader(proc.stdout.fileno()).read(counter, time.monotonic() + deadline)
            if kind is None:
                raise MeasurementError(
                    f"load run against {endpoint} did not finish within {deadline:.0f} s ({counter.value}/"
                    f"{spec.total_requests} requests done); pass a larger deadline_s or send fewer requests"
                )
            if kind == b"":
                proc.wait(timeout=_STOP_TIMEOUT_S)
                tail = launch.log_path.read_bytes()[-2000:].decode("utf-8", "replace")
                raise ProcessCrashed(f"load process died (exit code {proc.returncode}) with no result: {tail}")
            if kind == b"E":
                message, trace = pickle.loads(payload)
                raise ProcessCrashed(f"load process failed: {message}\n{trace}")
            proc.wait(timeout=_STOP_TIMEOUT_S)
        finally:
            child.stop(grace_s=0.0, kill_timeout_s=_STOP_TIMEOUT_S)  # SIGKILLs a process still running
    return build_report(spec, endpoint, pickle.loads(payload))


class FrameReader:
    """The parent's end of a child's framed answers: ``read`` returns the next ``R``/``E`` frame. Bytes read past a
    frame stay in the reader's buffer for the next call (a long-lived child may have answered several orders by the
    time one ``os.read`` returns; dropping them would lose those answers)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buf = bytearray()

    def read(self, counter: Any, deadline_at: float) -> tuple[bytes | None, bytes]:
        """Frames until ``R``/``E``: (kind, payload); (b"", b"") on EOF, (None, b"") on timeout. ``P`` frames (progress)
        set ``counter.value``."""
        buf = self._buf
        while True:
            while len(buf) >= _HEADER:
                kind, size = bytes(buf[:1]), int.from_bytes(buf[1:_HEADER], "little")
                if kind == b"P":
                    counter.value = size
                    del buf[:_HEADER]
                    continue
                if len(buf) < _HEADER + size:
                    break
                payload = bytes(buf[_HEADER : _HEADER + size])
                del buf[: _HEADER + size]
                return kind, payload
            remaining = deadline_at - time.monotonic()
            if remaining <= 0:
                return None, b""
            ready, _, _ = select.select([self.fd], [], [], remaining)
            if not ready:
                return None, b""
            chunk = os.read(self.fd, 1 << 20)
            if not chunk:
                return b"", b""
            buf += chunk


"""Start/stop the self-test stub server as its own process (used by the loadgen self-tests and bench)."""

from __future__ import annotations

import select
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from engine_fixtures.errors import ProcessStartError

READY_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class StubServer:
    url: str
    pid: int


@contextmanager
def stub_server(
    *,
    cpu: int | None = None,
    ttft_ms: float = 0.0,
    itl_ms: float = 0.0,
    python: str = sys.executable,
    extra: Sequence[str] = (),
) -> Iterator[StubServer]:
    """A running stub on 127.0.0.1 (ephemeral port); killed and reaped on exit, also on failure."""
    cmd = [
        python,
        "-m",
        "perf_tests.loadgen.stub_server",
        "--port",
        "0",
        "--ttft-ms",
        str(ttft_ms),
        "--itl-ms",
        str(itl_ms),
        *extra,
    ]
    if cpu is not None:
        cmd += ["--cpu", str(cpu)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], READY_TIMEOUT_S)
        line = proc.stdout.readline() if ready else ""
        if not line.startswith("LISTENING "):
            proc.kill()
            _, err = proc.communicate(timeout=STOP_TIMEOUT_S)
            raise ProcessStartError(f"stub server did not start within {READY_TIMEOUT_S} s: {line!r} {err[-2000:]}")
        yield StubServer(url=f"http://127.0.0.1:{int(line.split()[1])}", pid=proc.pid)
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=STOP_TIMEOUT_S)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()

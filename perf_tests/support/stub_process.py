"""Start/stop the self-test stub server as its own process (used by the loadgen self-tests and bench).

The stub is ``isolation.process.Supervised`` (stdout a pipe for its ``LISTENING <port>`` line, stderr to a
log quoted on failure, the curated child environment, this process's session) and always stopped: SIGTERM,
SIGKILL after ``STOP_TIMEOUT_S``, ``LeakError`` if anything survives.
"""

from __future__ import annotations

import select
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from engine_fixtures.errors import ProcessStartError
from engine_fixtures.isolation.process import CHILD_PASSTHROUGH, LaunchSpec, Supervised, curated_env
from perf_tests.support import child_env, launcher

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
    """A running stub on 127.0.0.1 (ephemeral port); stopped on exit, also on failure."""
    cmd = [
        python,
        *launcher("stub_server"),
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
    with tempfile.TemporaryDirectory(prefix="perf-stub-") as tmp:
        launch = LaunchSpec(tuple(cmd), Path(tmp, "stub.log"), child_env(curated_env(passthrough=CHILD_PASSTHROUGH)),
                            name="stub server", stdio="pipes", text=True, new_session=False)
        server = Supervised.start(launch)
        try:
            out = server.proc.stdout
            assert out is not None
            ready, _, _ = select.select([out], [], [], READY_TIMEOUT_S)
            line = out.readline() if ready else ""
            if not line.startswith("LISTENING "):
                server.stop(grace_s=0.0, kill_timeout_s=STOP_TIMEOUT_S)
                err = launch.log_path.read_text(errors="replace")
                raise ProcessStartError(f"stub server did not start within {READY_TIMEOUT_S} s: {line!r} {err[-2000:]}")
            yield StubServer(url=f"http://127.0.0.1:{int(line.split()[1])}", pid=server.pid)
        finally:
            server.stop(grace_s=STOP_TIMEOUT_S, kill_timeout_s=STOP_TIMEOUT_S)

"""One long-lived spawn consumer per test module, with spare pipes for extra producer processes."""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection

import pytest

from engine_fixtures.transport.shm import sweep_stale
from perf_tests.sglang.transport.pipe_consumer import serve

SPARE_PIPES = 3
READY_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class ConsumerProc:
    conn: Connection  # the test process's own pipe
    spare: tuple[Connection, ...]  # producer ends for extra producer processes
    proc: mp.process.BaseProcess

    def request(self, op: str, payload: bytes, timeout_s: float = 60.0) -> tuple[str, object]:
        self.conn.send((op, payload))
        if not self.conn.poll(timeout_s):
            raise TimeoutError(f"consumer pid {self.proc.pid} gave no reply within {timeout_s} s")
        return self.conn.recv()


@pytest.fixture(scope="module")
def consumer() -> Iterator[ConsumerProc]:
    ctx = mp.get_context("spawn")
    pairs = [ctx.Pipe() for _ in range(1 + SPARE_PIPES)]
    proc = ctx.Process(target=serve, args=([c for _, c in pairs],), name="perf-transport-consumer",
                       daemon=True)
    proc.start()
    for _, child in pairs:
        child.close()
    ends = tuple(p for p, _ in pairs)
    if not ends[0].poll(READY_TIMEOUT_S):  # it imports SGLang first where installed
        proc.kill()
        raise TimeoutError(f"consumer pid {proc.pid} was not ready within {READY_TIMEOUT_S} s")
    assert ends[0].recv() == ("ready", None)
    try:
        yield ConsumerProc(ends[0], ends[1:], proc)
    finally:
        for end in ends:
            end.close()  # EOF on every pipe ends the consumer's loop
        proc.join(timeout=30)
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=10)
        sweep_stale()
    assert proc.exitcode == 0, f"consumer exited with {proc.exitcode}"


@pytest.fixture(scope="session", autouse=True)
def _import_sglang_once() -> None:
    """Import SGLang's transport modules (if installed) before any Hypothesis test runs: SGLang raises the
    recursion limit at import, which Hypothesis reports as an error when it happens inside a test."""
    from engine_fixtures.transport import cuda_ipc, sglang_compat

    sglang_compat.find_shm_class()
    if cuda_ipc.skip_reason() is None:
        cuda_ipc.sglang_proxy_class()

"""``EngineHandle.set_arm`` on the stub engine: its copy path runs the suite's plugin on a stand-in of SGLang 0.5.16's
copy (``support.stub_copy``), so a live copy arm is switched, proved and felt end to end on a CPU box."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import aiohttp
import pytest

from engine_fixtures.engine.handle import EngineHandle, start_engine
from engine_fixtures.engine.proof import live_arm_problems
from engine_fixtures.engine.spec import EngineSpec
from engine_fixtures.errors import ConfigError, MeasurementError
from engine_fixtures.model.modeldir import write_model_dir
from engine_fixtures.transport.live import LiveArm
from perf_tests.support import launcher

STUB = launcher("stub_engine")
DEADLINE_S = 120.0
TORCH_MS = 40.0  # the stub's documented extra wait for a request whose copy ran the torch lines
BUFFER, TORCH = LiveArm(copy="buffer"), LiveArm(copy="torch")


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    model = write_model_dir(tmp_path_factory.mktemp("m") / "qwen-tiny", "tiny")
    spec = EngineSpec(model, launcher=STUB, name="stub", copy="buffer",
                      extra_args=("--stub-image-kb", "256", "--stub-torch-copy-ms", f"{TORCH_MS:g}"))
    h = start_engine(spec, tmp_path_factory.mktemp("live"), deadline_s=DEADLINE_S)
    try:
        yield h
    finally:
        h.stop()


def ttfts_ms(h: EngineHandle, n: int, concurrency: int = 4) -> list[float]:
    """Time to the first streamed token of ``n`` chat requests, ``concurrency`` at a time."""
    body = {"model": "default", "stream": True, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}

    async def run() -> list[float]:
        out: list[float] = []
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as s:
            async def one() -> None:
                t0 = time.perf_counter()
                async with s.post(h.url + "/v1/chat/completions", json=body) as r:
                    assert r.status == 200, await r.text()
                    async for line in r.content:
                        if line.startswith(b"data: {") and b'"delta"' in line:
                            out.append(1000 * (time.perf_counter() - t0))
                            return

            for _ in range(n // concurrency):
                await asyncio.gather(*(one() for _ in range(concurrency)))
        return out

    return asyncio.run(run())


def test_the_launch_arm_is_seq_0_in_every_process(engine: EngineHandle) -> None:
    assert (engine.arm, engine.arm_seq) == (BUFFER, 0)
    before = engine.proof()
    ttfts_ms(engine, 8)
    after = engine.proof()
    assert {(p.role, p.arm_seq) for p in after.required()} == {("http_server", 0), ("scheduler", 0)}
    assert live_arm_problems(engine.spec, BUFFER, before, after) == []
    assert after.since(before, "seq.0.shm_copies_buffer", "http_server") == 8


def test_a_live_copy_arm_is_proved_per_window_and_costs_what_the_stub_documents(engine: EngineHandle) -> None:
    """Buffer and torch (capped to one thread) in A B B A order on one engine: each window's proof says its arm
    served every copy, the wrong arm's judge says otherwise, and torch's TTFT is the stub's documented cost higher."""
    capped = LiveArm(copy="torch", threads=1)
    medians: dict[str, list[float]] = {"buffer": [], "torch": []}
    for arm in (BUFFER, capped, capped, BUFFER):
        before = engine.set_arm(arm)
        assert before.extra["arm_seq"] == engine.arm_seq
        ttft = ttfts_ms(engine, 8)
        after = engine.proof()
        assert live_arm_problems(engine.spec, arm, before, after) == []
        other = TORCH if arm == BUFFER else BUFFER
        assert live_arm_problems(engine.spec, other, before, after) != []
        assert after.since(before, f"seq.{engine.arm_seq}.shm_copies_{arm.copy}", "http_server") == 8
        medians[arm.copy].extend(ttft)
    # The fastest request of each arm: a loaded box only ever adds time, so the minimum is where the stub's fixed
    # cost shows whatever else runs (a mean of medians read 12.8 ms of 40 under a loaded CI run).
    gap = min(medians["torch"]) - min(medians["buffer"])
    assert gap > 0.5 * TORCH_MS, f"torch's fastest TTFT is {gap:.1f} ms above buffer's; the stub adds {TORCH_MS} ms"
    assert after.since(before, "copies_threads.1") == 0  # buffer runs at the launch count again


def test_a_process_that_does_not_answer_is_a_measurement_error(engine: EngineHandle) -> None:
    (sched,) = engine.pids()["scheduler"]
    os.kill(sched, signal.SIGSTOP)
    try:
        with pytest.raises(MeasurementError, match=rf"scheduler pid {sched} did not answer the proof flush \(its last "
                                                   r"proof: seq \d+, copy="):
            engine.set_arm(TORCH, deadline_s=2.0)
    finally:
        os.kill(sched, signal.SIGCONT)
    proof = engine.set_arm(TORCH)  # it catches up once it runs again
    assert {p.arm_seq for p in proof.required()} == {engine.arm_seq}


def test_bad_arms_are_config_errors_and_a_patch_no_process_carries_does_not_take(engine: EngineHandle) -> None:
    with pytest.raises(ConfigError, match="does nothing on the cpu transport"):
        engine.set_arm(LiveArm(ipc_cache="on"))
    with pytest.raises(ConfigError, match="unknown patch"):
        engine.set_arm(LiveArm(patches=(("slow-gpu", 1.0),)))
    with pytest.raises(MeasurementError, match=r"patch slow-scheduler=0.5 ms requested but no engine process "
                                               r"carries it: start the engine with the patch in its build"):
        engine.set_patch({"slow-scheduler": 0.5})

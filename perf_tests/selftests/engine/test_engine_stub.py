"""The engine fixture against a stub process tree with SGLang's titles and HTTP surface (CPU box).

Every test checks that nothing outlives the engine: no process of the tree, no cgroup.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import time
from pathlib import Path

import aiohttp
import psutil
import pytest

from engine_fixtures.engine.factory import EngineFactory
from engine_fixtures.engine.handle import EngineHandle, start_engine
from engine_fixtures.engine.lint import find_hidden_caps
from engine_fixtures.engine.prometheus import QUEUED, RUNNING, TTFT
from engine_fixtures.engine.spec import EngineSpec
from engine_fixtures.errors import ConfigError, ProcessCrashed, ProcessStartError
from engine_fixtures.isolation.shm_space import require_shm_space
from engine_fixtures.model.modeldir import write_model_dir
from perf_tests.support import launcher

STUB = launcher("stub_engine")
DEADLINE_S = 60.0

pytest_plugins = ("pytester",)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model_dir(tmp_path_factory.mktemp("m") / "qwen-tiny", "tiny")


def stub(model: Path, **fields: object) -> EngineSpec:
    return EngineSpec(model, launcher=STUB, name="stub", proof=False, **fields)  # type: ignore[arg-type]


def tree(handle: EngineHandle) -> set[int]:
    return {p for pids in handle.pids().values() for p in pids}


def assert_gone(pids: set[int]) -> None:
    alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert alive == [], f"processes outlived the engine: {alive}"


async def chat(url: str, n: int, max_tokens: int) -> list[int]:
    body = {
        "model": "default",
        "stream": True,
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": "hi"}],
    }
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout) as s:

        async def one() -> int:
            chunks = 0
            async with s.post(url + "/v1/chat/completions", json=body) as r:
                async for line in r.content:
                    if line.startswith(b"data: {") and b'"delta"' in line:
                        chunks += 1
            return chunks

        return list(await asyncio.gather(*(one() for _ in range(n))))


def test_ready_roles_config_metrics_flush_and_clean_stop(model: Path, tmp_path: Path) -> None:
    spec = stub(model, pp=8, gpus=tuple(range(8)), max_running_requests=64)
    h = start_engine(spec, tmp_path, deadline_s=DEADLINE_S)
    try:
        pids = h.pids()
        assert len(pids["scheduler"]) == 8
        assert len(pids["detokenizer"]) == 1
        assert pids["http_server"] == (h.pid,)
        cfg = h.config
        assert (cfg.pp_size, cfg.pp_max_micro_batch_size, cfg.max_running_requests) == (8, 8, 64)
        (cap,) = find_hidden_caps(cfg, 32)
        assert "--pp-max-micro-batch-size 32" in cap.message
        before = h.metrics().histogram(TTFT)
        chunks = asyncio.run(chat(h.url, 16, 4))
        assert chunks == [4] * 16
        after = h.metrics()
        assert after.histogram(TTFT).minus(before).count == 16
        assert after.total(RUNNING) == 0
        assert after.total(QUEUED) == 0
        assert h.flush_cache() is True
        assert h.url_for("v1", "models") == h.url + "/v1/models"
        all_pids = tree(h)
    finally:
        report = h.stop()
    assert report.killed == ()  # SIGTERM was enough
    assert_gone(all_pids)
    assert h.stop() is report  # idempotent


def test_unknown_model_path_is_refused_before_launch(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"python -m engine_fixtures\.model\.modeldir"):
        start_engine(stub(tmp_path / "nope"), tmp_path, deadline_s=DEADLINE_S)


def test_bad_flag_exits_2_with_the_log_tail(model: Path, tmp_path: Path) -> None:
    t0 = time.monotonic()
    with pytest.raises(ProcessStartError, match=r"(?s)exited with code 2.*unrecognized arguments: --no-such-flag"):
        start_engine(stub(model, extra_args=("--no-such-flag",)), tmp_path, deadline_s=DEADLINE_S)
    assert time.monotonic() - t0 < DEADLINE_S / 2  # the early exit is seen at once, not at the deadline


def test_port_in_use_names_the_holder(model: Path, tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(ConfigError, match=f"port {port} .* already in use"):
            start_engine(stub(model), tmp_path, deadline_s=DEADLINE_S, port=port)


def test_crash_before_ready_shows_the_cause(model: Path, tmp_path: Path) -> None:
    with pytest.raises(ProcessStartError, match=r"(?s)exited with code 3.*CUDA out of memory"):
        start_engine(stub(model, extra_args=("--stub-mode", "crash-before-ready")), tmp_path, deadline_s=DEADLINE_S)


def test_never_ready_hits_the_deadline_and_leaves_nothing(model: Path, tmp_path: Path) -> None:
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    t0 = time.monotonic()
    with pytest.raises(ProcessStartError, match="was not ready"):
        start_engine(stub(model, extra_args=("--stub-mode", "never-ready")), tmp_path, deadline_s=6.0)
    assert time.monotonic() - t0 < 6.0 + 12.0  # deadline plus bounded stop
    left = {p.pid for p in psutil.Process().children(recursive=True)} - before
    assert_gone(left)


def test_killed_mid_run_is_a_crash_with_the_log(model: Path, tmp_path: Path) -> None:
    h = start_engine(stub(model), tmp_path, deadline_s=DEADLINE_S)
    try:
        all_pids = tree(h)
        os.kill(h.pid, signal.SIGKILL)
        h.proc.proc.wait(timeout=10)
        with pytest.raises(ProcessCrashed, match=r"(?s)killed by signal SIGKILL.*stub_engine"):
            h.metrics()
    finally:
        h.stop()
    assert_gone(all_pids)


def test_arm_env_and_proof_dir_reach_the_engine(model: Path, tmp_path: Path) -> None:
    spec = stub(model, copy="buffer", ipc_cache="off").with_(proof=True)
    h = start_engine(spec, tmp_path, deadline_s=DEADLINE_S)
    try:
        env = psutil.Process(h.pid).environ()
        assert env["PERF_ARMS_COPY"] == "buffer"
        assert env["SGLANG_USE_IPC_POOL_HANDLE_CACHE"] == "0"
        proof = h.proof()
        roles_seen = sorted(p.role for p in proof.processes)
        assert roles_seen == ["detokenizer", "http_server", "scheduler"]
        assert proof.extra["flush_missing_pids"] == []
        assert json.loads(next(h.proof_dir.glob("proof-*.json")).read_text())["requested"]["copy"] == "buffer"
    finally:
        h.stop()


FAILING_ENGINE_TEST = """
import pytest

STUB = {"launcher": ("-m", "perf_tests.support.stub_engine"), "name": "stub", "proof": False}

@pytest.mark.parametrize("engine", [STUB], indirect=True)
def test_uses_the_engine(engine):
    assert engine.health()
    raise AssertionError("boom")
"""


def test_failing_test_shows_the_engine_log_tail(pytester: pytest.Pytester) -> None:
    """The ``engine`` fixture registers section "engine log (tail)", shown only because the test failed."""
    pytester.makepyfile(test_engine_user=FAILING_ENGINE_TEST)
    r = pytester.runpytest_inprocess()
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["*AssertionError: boom*", "*- engine log (tail) -*", "stub_engine: serving on*"])


def test_engine_segment_left_by_a_crash_is_removed_and_reported(model: Path, tmp_path: Path) -> None:
    """A crashed engine leaves its /dev/shm pool (SGLang does); the factory removes it and says so."""
    findings: list[str] = []
    factory = EngineFactory(tmp_path, DEADLINE_S, on_finding=findings.append)
    h = factory.get(stub(model, extra_args=("--stub-shm-mb", "1")))
    (pool,) = [n for n in os.listdir("/dev/shm") if n.startswith("sgl_shm_stub_") and n in h.log_tail()]
    os.kill(h.pid, signal.SIGKILL)
    h.proc.proc.wait(timeout=10)
    factory.close()
    assert not os.path.exists(f"/dev/shm/{pool}")
    assert any(pool in f for f in findings), findings


def test_nearly_full_shm_is_refused_before_launch(small_tmpfs) -> None:  # type: ignore[no-untyped-def]
    shm = small_tmpfs("shm", "8m")
    fd = os.open(shm / "leftover", os.O_CREAT | os.O_RDWR, 0o600)
    os.posix_fallocate(fd, 0, 7 << 20)
    os.close(fd)
    with pytest.raises(ConfigError, match=r"nearly full: 1 MiB free of 8 MiB.*at least 4 MiB.*leftover \(7 MiB\)"):
        require_shm_space(4, shm)
    require_shm_space(0.5, shm)

"""The GPU tier's entry points against the stub engine (SGLang's titles and HTTP surface), real py-spy.

The stub's HTTP server (the untitled root, like SGLang's) does the streaming work and its titled scheduler children
run the decode steps (``support.stub_scheduler``); its detokenizer child sits blocked in ``recv``, so py-spy (idle
threads left out) samples nothing there and the history differential says so in one line instead of ranking noise.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiohttp
import pytest

from engine_fixtures.engine.handle import start_engine
from engine_fixtures.engine.spec import EngineSpec
from engine_fixtures.model.modeldir import write_model_dir
from engine_fixtures.profile import store
from engine_fixtures.profile.engine import ProfileSettings, explain_history, profile_engine
from engine_fixtures.profile.report import ProfileBook
from perf_tests.support import launcher

BODY = {"model": "default", "stream": True, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}


async def _load(url: str, seconds: float, concurrency: int = 8) -> int:
    done, end = 0, time.monotonic() + seconds
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as s:

        async def worker() -> None:
            nonlocal done
            while time.monotonic() < end:
                async with s.post(url + "/v1/chat/completions", json=BODY) as r:
                    async for _line in r.content:
                        pass
                done += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return done


@pytest.fixture
def stub(tmp_path: Path):  # type: ignore[no-untyped-def]
    model = write_model_dir(tmp_path / "qwen-tiny", "tiny")
    spec = EngineSpec(model, launcher=launcher("stub_engine"), name="stub", proof=False)
    handle = start_engine(spec, tmp_path / "engine", deadline_s=60.0)
    try:
        yield handle
    finally:
        handle.stop()


def test_stub_engine_roles_profiled_and_idle_roles_said_so(stub, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    def drive(seconds: float) -> int:
        return asyncio.run(_load(stub.url, seconds))

    roles = {r: p for r, p in stub.pids().items() if r in ("http_server", "scheduler", "detokenizer") and p}
    assert set(roles) == {"http_server", "scheduler", "detokenizer"}, stub.pids()
    ps = ProfileSettings("always", 100.0, 1.5, tmp_path / "prof")
    prof = profile_engine(roles, drive, ps, label="stub")
    assert prof.notes == ()
    http = prof.profiles["http_server"]
    assert http.requests > 20
    assert http.samples > 0
    assert any(k[1].endswith("support/stub_engine.py") for k in http.functions())
    assert prof.profiles["detokenizer"].samples == 0  # blocked in recv: idle, not sampled

    pool = tmp_path / "baselines" / "key" / "stub.json"
    store.save_beside(pool, prof)
    book = ProfileBook()
    text = explain_history(book, ["stub"], {"regression"}, ProfileSettings("on-regression", 100.0, 1.5, tmp_path),
                           (roles, drive), pool)
    assert "detokenizer: no differential profile: no samples (0 candidate, 0 reference)" in text, text
    assert "http_server: " in text
    assert explain_history(book, ["stub"], {"pass"}, ProfileSettings("on-regression"), (roles, drive), pool) == ""

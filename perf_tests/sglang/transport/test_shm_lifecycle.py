"""Failure paths and ownership rules of the SHM transport, plus several producers into one consumer."""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import pickle

import pytest
import torch

from engine_fixtures.errors import ConfigError
from engine_fixtures.isolation.leaks import foreign_suite_segment
from engine_fixtures.transport import shm
from engine_fixtures.transport.arms import COPY_ARMS
from engine_fixtures.transport.shm import ShmTensor, list_segments, sweep_stale


def test_unknown_arm_names_the_choices() -> None:
    with pytest.raises(ConfigError, match="torch, buffer"):
        ShmTensor.create(torch.zeros(2), copy="memcpy")


@pytest.mark.parametrize("arm", COPY_ARMS)
def test_failure_mid_copy_unlinks(monkeypatch: pytest.MonkeyPatch, arm: str) -> None:
    before = list_segments()

    def boom(buf: memoryview, src: torch.Tensor) -> None:
        buf[:1] = b"x"  # the segment exists and is half written
        raise OSError("injected ENOSPC")

    monkeypatch.setitem(shm.COPIERS, arm, boom)
    with pytest.raises(OSError, match="injected"):
        ShmTensor.create(torch.ones(1000), copy=arm)
    assert {n for n in list_segments() - before if not foreign_suite_segment(n)} == set()


def test_handle_pickles_metadata_only_and_is_consumed_once() -> None:
    t = torch.arange(1 << 16, dtype=torch.float32)
    handle = ShmTensor.create(t, copy="buffer")
    blob = pickle.dumps(handle)
    assert len(blob) < 512, "the pickle must carry metadata, not the 256 KiB payload"
    assert torch.equal(pickle.loads(blob).materialize(), t)
    with pytest.raises(FileNotFoundError, match="consumed once"):
        handle.materialize()
    assert handle.discard() is False


def test_discard_releases_unread_segment() -> None:
    handle = ShmTensor.create(torch.ones(10), copy="torch")
    assert handle.name in list_segments()
    assert handle.discard() is True
    assert handle.name not in list_segments()


def _dead_creator_segment() -> str:
    return ShmTensor.create(torch.ones(4)).name  # runs in a child that exits without releasing


def test_sweep_stale_removes_only_dead_creators_segments() -> None:
    ctx = mp.get_context("spawn")
    with ctx.Pool(1) as pool:
        orphan = pool.apply(_dead_creator_segment)
    live = ShmTensor.create(torch.ones(4))
    try:
        assert orphan in list_segments()
        assert orphan in sweep_stale()
        assert orphan not in list_segments()
        assert live.name in list_segments(), "a live creator's segment must survive the sweep"
    finally:
        live.discard()


def _producer(conn, seed: int, n: int, arm: str, out) -> None:
    gen = torch.Generator().manual_seed(seed)
    ok = 0
    for i in range(n):
        raw = torch.randint(0, 256, (4 * (1000 + i * 997),), dtype=torch.uint8, generator=gen)
        t = raw.view(torch.float32)
        conn.send(("materialize", pickle.dumps(ShmTensor.create(t, copy=arm))))
        status, reply = conn.recv()
        ok += status == "ok" and reply.sha256 == hashlib.sha256(t.numpy().tobytes()).hexdigest()
    conn.send(("stop", b""))
    conn.recv()
    out.send(ok)


def test_several_producers_into_one_consumer(consumer) -> None:
    ctx = mp.get_context("spawn")
    before = list_segments()
    results, procs = [], []
    for i, conn in enumerate(consumer.spare):
        parent, child = ctx.Pipe()
        p = ctx.Process(target=_producer, args=(conn, i, 20, COPY_ARMS[i % 2], child), daemon=True)
        p.start()
        child.close()
        results.append(parent)
        procs.append(p)
    try:
        counts = [r.recv() if r.poll(120) else None for r in results]
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    assert counts == [20] * len(procs)
    assert all(p.exitcode == 0 for p in procs)
    assert {n for n in list_segments() - before if not foreign_suite_segment(n)} == set()

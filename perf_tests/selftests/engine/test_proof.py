"""The arm proof: the plugin's recorder and copy classifier, and the judge that fails a wrong arm."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from engine_fixtures.engine.proof import (
    ArmProof,
    ProcessProof,
    arm_problems,
    assert_arm,
    launch_arm_of,
    read_proofs,
    request_flush,
)
from engine_fixtures.engine.spec import EngineSpec
from engine_fixtures.errors import ConfigError
from engine_fixtures.sglang_plugin.distinfo import plugin_visible, write_dist_info
from engine_fixtures.sglang_plugin.instrument import classify_copy
from engine_fixtures.transport import sglang_compat
from engine_fixtures.transport.live import LiveArm

MODEL = Path("/m")
REPO = Path(__file__).resolve().parents[3]
IMPLS = {"copy_impl.stock": "torch", "copy_impl.torch": "torch", "copy_impl.buffer": "buffer",
         "copy_threads_launch": "2"}


def copies(seq: int, label: str, n: float, threads: int = 2) -> dict[str, float]:
    """The counters the plugin's copy dispatcher writes for ``n`` copies of ``label`` under ``seq``."""
    return {f"shm_copies_{label}": n, f"seq.{seq}.shm_copies_{label}": n, f"copies_threads.{threads}": n}


def proc(role: str, pid: int = 1, *, seq: int = 0, arm: LiveArm | None = None, installed: dict | None = None,
         counters: dict | None = None, patch_ms: dict | None = None, errors: tuple = (),
         arm_errors: tuple = ()) -> ProcessProof:
    """One process's proof as the plugin writes it."""
    arm = arm if arm is not None else LiveArm()
    return ProcessProof(pid, role, role, "0.5.16", {}, {**IMPLS, **(installed or {})}, dict(counters or {}), errors, 0,
                        patch_ms or {}, seq, arm.to_dict(), arm_errors)


def test_copy_arm_that_ran_passes_and_wrong_or_missing_copies_fail() -> None:
    buffer = EngineSpec(MODEL, copy="buffer")
    launch = launch_arm_of(buffer)
    assert launch == LiveArm(copy="buffer")
    assert arm_problems(buffer, ArmProof((proc("http_server", arm=launch, counters=copies(0, "buffer", 40)),))) == []
    mixed = {**copies(0, "buffer", 3), **copies(0, "torch", 37)}
    wrong = arm_problems(buffer, ArmProof((proc("http_server", arm=launch, counters=mixed),)))
    assert any("37 SHM copies ran another implementation (torch: 37)" in p for p in wrong), wrong
    none = arm_problems(buffer, ArmProof((proc("http_server", arm=launch),)))
    assert any("zero buffer SHM copies" in p for p in none)
    with pytest.raises(ConfigError, match="did not run as requested"):
        assert_arm(buffer, ArmProof((proc("http_server", arm=launch, counters=copies(0, "torch", 40)),)))
    assert "plugin did not load" in arm_problems(buffer, ArmProof(()))[0]


def test_stock_is_judged_by_the_label_of_sglangs_own_code() -> None:
    stock = EngineSpec(MODEL)
    assert arm_problems(stock, ArmProof((proc("http_server", counters=copies(0, "torch", 5)),))) == []
    moved = proc("http_server", installed={"copy_impl.stock": "buffer"}, counters=copies(0, "torch", 5))
    assert any("ran another implementation" in p for p in arm_problems(stock, ArmProof((moved,))))


def test_an_engine_switched_since_launch_is_not_its_launch_arm() -> None:
    """arm_problems judges the launch arm over the engine's life; an engine on another seq contradicts it."""
    switched = proc("http_server", seq=3, arm=LiveArm(copy="buffer"), counters=copies(3, "buffer", 9))
    problems = arm_problems(EngineSpec(MODEL), ArmProof((switched,)))
    assert any("was on arm seq 3 (copy=buffer,ipc_cache=stock,threads=launch)" in p for p in problems), problems
    assert any("under another arm seq than 0" in p for p in problems)


def ipc_proof(cache: str, opens: float, carried: str | None = None, seq: int = 0) -> ArmProof:
    arm = LiveArm(ipc_cache=cache)
    value = carried or ("on" if cache == "on" else "off")
    main = proc("http_server", seq=seq, arm=arm, installed={"ipc_cache_layout": "module-global",
                                                            "ipc_cache_stock": "off"},
                counters={f"ipc_proxies_cache_{value}": 40, f"seq.{seq}.ipc_proxies_cache_{value}": 40})
    sched = proc("scheduler", 2, seq=seq, arm=arm, counters={"ipc_rebuilds": 40, "ipc_opens": opens})
    return ArmProof((main, sched))


@pytest.mark.parametrize(
    ("cache", "opens", "ok"),
    [("on", 1, True), ("on", 40, False), ("off", 40, True), ("off", 2, False), ("stock", 40, True),
     ("stock", 1, False)],
)
def test_ipc_cache_arm_is_judged_by_opens_per_rebuild(cache: str, opens: float, ok: bool) -> None:
    """``stock`` is the release's own value (here 0.5.16's: off), as the switch reports it."""
    spec = EngineSpec(MODEL, mm_feature_transport="cuda_ipc", ipc_cache=cache)
    assert (arm_problems(spec, ipc_proof(cache, opens)) == []) is ok
    main, _ = ipc_proof(cache, opens).processes
    assert any("zero IPC features" in p for p in arm_problems(spec, ArmProof((main, proc("scheduler", 2)))))


def test_ipc_proxies_that_carried_the_other_value_fail_the_arm() -> None:
    spec = EngineSpec(MODEL, mm_feature_transport="cuda_ipc", ipc_cache="off")
    problems = arm_problems(spec, ipc_proof("off", 40, carried="on"))
    assert "ipc_cache=off requested but 40 CUDA IPC proxies carried cache=on" in problems
    assert any("zero CUDA IPC proxies with cache=off" in p for p in problems)


class StockShm:
    """Mirrors SGLang 0.5.16's ``ShmPointerMMData.__init__`` copy lines (the classifier's and rewrite's input)."""

    def __init__(self, tensor, precomputed_hash=None):
        nbytes = tensor.numel() * tensor.element_size()
        shm = SimpleNamespace(buf=memoryview(bytearray(nbytes)))
        try:
            dst = torch.frombuffer(shm.buf, dtype=torch.uint8)
            dst.copy_(tensor.view(torch.uint8).reshape(-1))
        except BaseException:
            raise
        self.shm = shm


stock_init = StockShm.__init__


def test_classifier_reads_the_code_that_really_runs() -> None:
    buffer_init = sglang_compat.buffer_copy_init(stock_init)
    assert classify_copy(stock_init) == "torch"
    assert classify_copy(buffer_init) == "buffer"

    class Shm:
        __init__ = stock_init

    sglang_compat.apply_copy_arm(Shm, "buffer")
    assert classify_copy(Shm.__init__) == "buffer"  # through the counting wrapper
    t = torch.arange(6, dtype=torch.int16)
    assert bytes(Shm(t).shm.buf) == t.numpy().tobytes()  # the rewrite still copies the bytes
    sglang_compat.restore(Shm)
    assert classify_copy(Shm.__init__) == "torch"


def test_the_buffer_copy_is_named_by_module_wherever_its_build_is_installed() -> None:
    """The rewritten copy's code carries SGLang's module and function, not the file's absolute path: an A/B's two
    builds sit at different paths, and a profile keys functions by where they are (0.00 -> 3.54 ms/req of a "new"
    buffer copy on the H100 A/B of 2026-12-07, the same function in both builds)."""
    code = sglang_compat.buffer_copy_init(stock_init).__code__
    assert code.co_filename == f"<perf buffer copy of {__name__}.StockShm.__init__>"
    assert "/" not in code.co_filename


def test_plugin_writes_proof_in_a_real_process_and_answers_flush_requests(tmp_path: Path) -> None:
    """Load the plugin through its entry point in a child (as SGLang does) and read the proof back."""
    site = tmp_path / "site"
    write_dist_info(site)
    proof_dir = tmp_path / "proof"
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": f"{site}:{REPO}",
        "PERF_ARMS_PROOF_DIR": str(proof_dir),
        "PERF_ARMS_COPY": "buffer",
        "PERF_ARMS_TRANSPORT": "cpu",
    }
    assert plugin_visible(sys.executable, env)
    code = (
        "import importlib.metadata as m, sys\n"
        "[e.load()() for e in m.entry_points(group='sglang.srt.plugins')]\n"
        "import engine_fixtures.sglang_plugin as p; p.active_recorder().add('probe', 2)\n"
        "sys.stdout.write('up\\n'); sys.stdout.flush(); sys.stdin.read()\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == b"up\n"
        proof = request_flush(proof_dir, {child.pid}, deadline_s=10.0)
        assert proof.extra["flush_missing_pids"] == []
        (p,) = proof.processes
        assert p.pid == child.pid
        assert p.role == "http_server"
        assert p.requested["copy"] == "buffer"
        assert p.count("probe") == 2
        assert any("copy: cannot import" in e for e in p.errors)  # no SGLang here: the proof says so
    finally:
        child.communicate(b"", timeout=10)
    assert child.returncode == 0
    final = json.loads(next(proof_dir.glob("proof-*.json")).read_text())
    assert final["counters"]["probe"] == 2
    assert read_proofs(proof_dir).total("probe") == 2

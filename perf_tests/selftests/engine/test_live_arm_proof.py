"""Live arms: the plugin's gate and arms.json, the judge of a window's proofs, the judge of a switch, and the copy
dispatcher in a real plugin process on the stub engine's stand-in class (the copy SGLang 0.5.16 makes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from engine_fixtures.engine.proof import ArmProof, live_arm_problems, request_flush, switch_problems
from engine_fixtures.engine.spec import EngineSpec
from engine_fixtures.sglang_plugin.arm_state import LiveState, launch_arm, write_arm_file
from engine_fixtures.sglang_plugin.distinfo import write_dist_info
from engine_fixtures.transport.live import ARMS_FILE, LiveArm
from perf_tests.selftests.engine.test_proof import copies, proc

REPO = Path(__file__).resolve().parents[3]
MODEL = Path("/m")
CPU = EngineSpec(MODEL)
WAIT_S = 10.0
BUFFER, TORCH = LiveArm(copy="buffer"), LiveArm(copy="torch")


# ---------------------------------------------------------------------------------------------- the plugin's side
def test_launch_arm_reads_the_variables_the_spec_sets() -> None:
    env = {"PERF_ARMS_COPY": "buffer", "PERF_ARMS_IPC_CACHE": "off", "PERF_ARMS_PATCH": "slow-scheduler=0.3"}
    assert launch_arm(env) == LiveArm("buffer", "off", None, (("slow-scheduler", 0.3),))
    assert launch_arm({}) == LiveArm()
    with pytest.raises(ValueError, match="use one of stock, torch, buffer"):
        launch_arm({"PERF_ARMS_COPY": "numpy"})


def test_a_switch_waits_for_the_call_in_flight_and_holds_new_calls_back() -> None:
    live = LiveState(LiveArm())
    inside, release, switched, second_in = (threading.Event() for _ in range(4))
    seen: list[int] = []

    def long_call() -> None:
        with live.entered() as (seq, _arm):
            inside.set()
            assert release.wait(WAIT_S)
            seen.append(seq)

    def second_call() -> None:
        with live.entered() as (seq, _arm):
            seen.append(seq)
            second_in.set()

    first = threading.Thread(target=long_call)
    first.start()
    assert inside.wait(WAIT_S)
    switcher = threading.Thread(target=lambda: (live.switch(1, BUFFER), switched.set()))
    switcher.start()
    late = threading.Thread(target=second_call)
    late.start()
    assert not switched.wait(0.2), "the switch did not wait for the call of the old arm"
    assert not second_in.is_set(), "a new call entered while a switch was pending"
    release.set()
    assert switched.wait(WAIT_S)
    assert second_in.wait(WAIT_S)
    for t in (first, switcher, late):
        t.join(WAIT_S)
    assert seen == [0, 1]  # the old call ran wholly under seq 0, the held-back one under seq 1
    assert (live.seq, live.arm, live.arm_errors) == (1, BUFFER, [])


def test_calls_nest_on_one_thread_and_a_stuck_call_is_reported() -> None:
    live = LiveState(LiveArm())
    with live.entered(), live.entered() as (seq, _):  # re-entrant: no deadlock on itself
        assert seq == 0
        live.switch(1, TORCH, timeout_s=0.05)  # a call of seq 0 is in flight on this very thread
    assert live.seq == 1
    assert live.arm_errors == ["arm seq 1: 2 call(s) of seq 0 still ran after 0.05 s, so the switch could not wait "
                               "for them"]


def test_arms_json_that_is_not_an_arm_is_refused_and_said(tmp_path: Path) -> None:
    live = LiveState(LiveArm())
    write_arm_file(tmp_path, BUFFER, 4)
    live.refresh(tmp_path)
    assert (live.seq, live.arm) == (4, BUFFER)
    (tmp_path / ARMS_FILE).write_text(json.dumps({"seq": 5, "copy": "numpy"}))
    live.refresh(tmp_path)
    snap = live.snapshot()
    assert (snap["arm_seq"], snap["arm_now"]["copy"]) == (4, "buffer")
    assert snap["arm_errors"] == ["arms.json refused, arm seq 4 kept: live arm copy='numpy': use one of stock, "
                                  "torch, buffer"]


# ---------------------------------------------------------------------------------------------- a window's proofs
def window(arm: LiveArm, seq: int, *, main: dict, sched: dict | None = None, before_main: dict | None = None,
           sched_seq: int | None = None, **kw: object) -> tuple[ArmProof, ArmProof]:
    """The proofs around a window on ``arm`` (seq ``seq``): before has ``before_main``, after ``main`` on top."""
    prior = before_main or {}
    after_main = {k: prior.get(k, 0.0) + main.get(k, 0.0) for k in {*prior, *main}}
    before = ArmProof((proc("http_server", 1, seq=seq, arm=arm, counters=prior, **kw),
                       proc("scheduler", 2, seq=seq, arm=arm)), {"arm_seq": seq, "arm": arm.to_dict()})
    s_seq = seq if sched_seq is None else sched_seq
    after = ArmProof((proc("http_server", 1, seq=seq, arm=arm, counters=after_main, **kw),
                      proc("scheduler", 2, seq=s_seq, arm=arm if s_seq == seq else LiveArm(), counters=sched)))
    return before, after


def test_a_window_is_judged_by_what_grew_in_it_under_its_seq() -> None:
    """Copies of older arms before the window do not count; the window's own copies must be the arm's."""
    history = {**copies(1, "torch", 50), **copies(2, "buffer", 1)}
    assert live_arm_problems(CPU, BUFFER, *window(BUFFER, 2, main=copies(2, "buffer", 40), before_main=history)) == []
    straggler = {**copies(2, "buffer", 40), "seq.1.shm_copies_torch": 1.0, "shm_copies_torch": 1.0}
    assert live_arm_problems(CPU, BUFFER, *window(BUFFER, 2, main=straggler, before_main=history)) == [
        "1 SHM copies in the window ran under another arm seq than 2: a process was not switched"]
    mislabelled = {**copies(2, "buffer", 40), "seq.2.shm_copies_torch": 1.0}
    problems = live_arm_problems(CPU, BUFFER, *window(BUFFER, 2, main=mislabelled, before_main=history))
    (problem,) = problems
    assert "1 SHM copies ran another implementation (torch: 1)" in problem
    idle = live_arm_problems(CPU, BUFFER, *window(BUFFER, 2, main={}, before_main=history))
    assert any("zero buffer SHM copies were recorded under arm seq 2" in p for p in idle)


def test_a_process_not_on_the_arm_or_the_wrong_arm_judged_is_a_problem() -> None:
    problems = live_arm_problems(CPU, BUFFER, *window(BUFFER, 2, main=copies(2, "buffer", 9), sched_seq=1))
    assert ("scheduler pid 2 was on arm seq 1 (copy=stock,ipc_cache=stock,threads=launch) after the window, not on "
            "seq 2 (copy=buffer,ipc_cache=stock,threads=launch)") in problems
    wrong = live_arm_problems(CPU, TORCH, *window(BUFFER, 2, main=copies(2, "buffer", 9)))
    assert any("the engine's live arm (seq 2) is copy=buffer" in p and "not copy=torch" in p for p in wrong)
    before, after = window(BUFFER, 2, main=copies(2, "buffer", 9))
    stale = ArmProof(after.processes, {"flush_missing_pids": [2], "live_pids": [1, 2]})
    assert any("pids [2] did not answer the proof flush after the window" in p
               for p in live_arm_problems(CPU, BUFFER, before, stale))


def test_thread_cap_is_judged_per_copy() -> None:
    capped = LiveArm(copy="torch", threads=1)
    assert live_arm_problems(CPU, capped, *window(capped, 1, main=copies(1, "torch", 8, threads=1))) == []
    problems = live_arm_problems(CPU, capped, *window(capped, 1, main=copies(1, "torch", 8, threads=2)))
    assert "threads=1 requested but 8 SHM copies in http_server pid 1 ran with 2 thread(s), not 1" in problems
    launch = live_arm_problems(CPU, TORCH, *window(TORCH, 1, main=copies(1, "torch", 8, threads=1)))
    assert "threads=launch requested but 8 SHM copies in http_server pid 1 ran with 1 thread(s), not 2" in launch


def test_patches_are_judged_by_their_state_and_their_calls() -> None:
    arm = LiveArm(copy="buffer", patches=(("slow-tokenizer", 0.5),))
    calls = {**copies(1, "buffer", 10), "patch_calls.slow-tokenizer": 10.0, "patch_ms.slow-tokenizer": 5.0}
    on = {"patch_ms": {"slow-tokenizer": 0.5}}
    assert live_arm_problems(CPU, arm, *window(arm, 1, main=calls, **on)) == []
    short = live_arm_problems(CPU, arm, *window(arm, 1, main={**calls, "patch_ms.slow-tokenizer": 4.0}, **on))
    assert "patch slow-tokenizer: 4 ms spun over 10 calls in the window, not 0.5 ms each" in short
    idle = live_arm_problems(CPU, arm, *window(arm, 1, main=copies(1, "buffer", 10), **on))
    assert "patch slow-tokenizer=0.5 ms requested but it was called zero times in the window" in idle
    stale = live_arm_problems(CPU, arm, *window(arm, 1, main=calls, patch_ms={"slow-tokenizer": 0.3}))
    assert "patch slow-tokenizer: http_server pid 1 runs 0.3 ms, not 0.5" in stale
    nowhere = live_arm_problems(CPU, arm, *window(arm, 1, main=calls))
    assert any("no engine process carries it: start the engine with the patch in its build" in p for p in nowhere)


# ---------------------------------------------------------------------------------------------- a switch's proof
def test_switch_problems_name_each_process_and_what_it_reports() -> None:
    on = (proc("http_server", 1, seq=3, arm=BUFFER), proc("scheduler", 2, seq=3, arm=BUFFER))
    assert switch_problems(BUFFER, 3, ArmProof(on, {"flush_missing_pids": [], "live_pids": [1, 2]})) == []
    stale = (proc("http_server", 1, seq=3, arm=BUFFER), proc("scheduler", 2, seq=2, arm=TORCH),
             proc("scheduler", 4, seq=2, arm=TORCH, arm_errors=("copy=buffer cannot be built",)))
    problems = switch_problems(BUFFER, 3, ArmProof(stale, {"flush_missing_pids": [4, 5], "live_pids": [1, 2, 4, 5]}))
    assert problems == [
        "pid 5 wrote no proof at all",
        "scheduler pid 2 reports seq 2 (copy=torch,ipc_cache=stock,threads=launch)",
        "scheduler pid 4 did not answer the proof flush (its last proof: seq 2, copy=torch,ipc_cache=stock,"
        "threads=launch)",
        "scheduler pid 4: copy=buffer cannot be built",
    ]
    dead = (proc("detokenizer", 9, seq=0),)  # not a process the flush waited for
    assert switch_problems(BUFFER, 3, ArmProof(on + dead, {"flush_missing_pids": [], "live_pids": [1, 2]})) == []


# ---------------------------------------------------------------------------------------------- a real plugin process
CHILD = """
import importlib.metadata as m, json, sys
[e.load()() for e in m.entry_points(group='sglang.srt.plugins')]
import torch
from perf_tests.support.stub_copy import copied_with_torch
image = torch.arange(40000, dtype=torch.int32)
sys.stdout.write('up\\n'); sys.stdout.flush()
for line in sys.stdin:
    n = int(line)
    ran = [copied_with_torch(image) for _ in range(n)]
    ok = all(torch.equal(obj.materialize(), image) for obj, _ in ran)
    print(json.dumps({"torch": [t for _, t in ran], "intact": ok, "threads": torch.get_num_threads()}), flush=True)
"""


@pytest.fixture
def plugin_child(tmp_path: Path):  # type: ignore[no-untyped-def]
    site = tmp_path / "site"
    write_dist_info(site)
    proof_dir = tmp_path / "proof"
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": f"{site}:{REPO}", "PERF_ARMS_PROOF_DIR": str(proof_dir),
           "PERF_ARMS_COPY": "buffer", "PERF_ARMS_TRANSPORT": "cpu",
           "PERF_ARMS_SHM_MODULE": "perf_tests.support.stub_copy"}
    child = subprocess.Popen([sys.executable, "-c", CHILD], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    assert child.stdout is not None
    assert child.stdin is not None
    assert child.stdout.readline() == "up\n"

    def copy(n: int) -> dict:
        child.stdin.write(f"{n}\n")
        child.stdin.flush()
        return json.loads(child.stdout.readline())

    try:
        yield child, proof_dir, copy
    finally:
        child.communicate("", timeout=WAIT_S)
    assert child.returncode == 0


def switch(proof_dir: Path, pid: int, arm: LiveArm, seq: int) -> ArmProof:
    write_arm_file(proof_dir, arm, seq)
    proof = request_flush(proof_dir, {pid}, deadline_s=WAIT_S)
    assert switch_problems(arm, seq, proof) == [], proof
    return proof


def test_copy_arms_switch_live_in_a_plugin_process(plugin_child) -> None:  # type: ignore[no-untyped-def]
    """The launch arm (buffer), then torch with a thread cap of 1, then stock: the code that copied changes with
    the live arm (the stand-in's own evidence), the bytes survive, and the proof counts each copy under its code's
    label, the arm's seq and the thread count it ran with, on the thread that copied."""
    child, proof_dir, copy = plugin_child
    start = request_flush(proof_dir, {child.pid}, deadline_s=WAIT_S)
    (p,) = start.processes
    assert (p.arm_seq, p.arm_now, p.errors) == (0, BUFFER.to_dict(), ())
    assert p.installed["copy_module"] == "perf_tests.support.stub_copy"
    launch_threads = copy(3)
    assert launch_threads["torch"] == [False] * 3
    assert launch_threads["intact"]
    capped = LiveArm(copy="torch", threads=1)
    before = switch(proof_dir, child.pid, capped, 1)
    ran = copy(4)
    assert ran == {"torch": [True] * 4, "intact": True, "threads": 1}  # the cap reached the copying thread
    after = request_flush(proof_dir, {child.pid}, deadline_s=WAIT_S)
    assert live_arm_problems(CPU, capped, before, after) == []
    assert live_arm_problems(CPU, LiveArm(copy="torch", threads=2), before, after) != []
    assert after.since(before, "seq.1.shm_copies_torch") == 4
    assert after.total("seq.0.shm_copies_buffer") == 3
    assert after.since(before, "copies_threads.1") == 4
    before = switch(proof_dir, child.pid, LiveArm(), 2)
    assert copy(2) == {"torch": [True] * 2, "intact": True, "threads": launch_threads["threads"]}  # None: restored
    after = request_flush(proof_dir, {child.pid}, deadline_s=WAIT_S)
    assert live_arm_problems(CPU, LiveArm(), before, after) == []
    assert after.since(before, "seq.2.shm_copies_torch") == 2

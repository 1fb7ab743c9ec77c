"""The plugin's live copy dispatcher on the installed SGLang's own ``ShmPointerMMData`` (no engine, no GPU).

One dispatcher is installed on the class (``sglang_plugin.instrument.install_copy_dispatch``); the live arm is
switched between calls as the proof thread does (``LiveState.switch``). For every arm and input: the code that
copied is the arm's (the C functions it called, seen by ``sys.setprofile``), the bytes survive SGLang's own
pickle/materialize round trip bitwise, and the proof counts the copy under its code's label and the arm's seq; a
thread cap is applied on the thread that copies, and ``threads=None`` gives that thread its first count back.
"""

from __future__ import annotations

import pickle
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine_fixtures.sglang_plugin.arm_state import LiveState
from engine_fixtures.sglang_plugin.instrument import SHM_MODULE_ENV, install_copy_dispatch
from engine_fixtures.sglang_plugin.proof_file import Recorder
from engine_fixtures.transport import sglang_compat
from engine_fixtures.transport.arms import ARMS, ENGINE_COPY_ARMS
from engine_fixtures.transport.live import LiveArm
from perf_tests.sglang.transport.strategies import Case, cases
from perf_tests.sglang.transport.test_roundtrip import sglang_known_failure

pytestmark = pytest.mark.sglang
WAIT_S = 60.0
CODE = {"torch": {"frombuffer", "copy_"}, "buffer": {"numpy"}}  # C calls each copy's lines make


@pytest.fixture(scope="module")
def dispatched(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """SGLang's class with the dispatcher installed (its own ``__init__`` put back after the module)."""
    lookup = sglang_compat.find_shm_class()
    if lookup.error:
        pytest.fail(lookup.error)
    if lookup.cls is None:
        pytest.skip(lookup.skip_reason or "")
    cls = lookup.cls
    own = cls.__dict__["__init__"]
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv(SHM_MODULE_ENV, raising=False)
        rec = Recorder(tmp_path_factory.mktemp("proof"), {}, live=LiveState(LiveArm()))
        install_copy_dispatch(rec)
    try:
        assert rec.errors == []
        assert rec.live.arm_errors == []
        assert {k: v for k, v in rec.installed.items() if k.startswith("copy_impl.")} == {
            "copy_impl.stock": "torch", "copy_impl.torch": "torch", "copy_impl.buffer": "buffer"}
        yield cls, rec
    finally:
        cls.__init__ = own


def c_calls(fn: Callable[[], Any]) -> tuple[Any, set[str]]:
    """``fn()`` and the names of the C functions it called on this thread."""
    seen: set[str] = set()

    def profile(_frame: Any, event: str, arg: Any) -> None:
        if event == "c_call":
            seen.add(getattr(arg, "__name__", ""))

    sys.setprofile(profile)
    try:
        out = fn()
    finally:
        sys.setprofile(None)
    return out, seen


def switch(rec: Recorder, arm: LiveArm) -> int:
    seq = rec.live.seq + 1
    rec.live.switch(seq, arm)
    assert rec.live.arm_errors == []
    return seq


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=cases(), copy=st.sampled_from(ENGINE_COPY_ARMS))
def test_switching_the_live_arm_switches_the_code_that_copies(dispatched, case: Case, copy: str) -> None:
    cls, rec = dispatched
    seq = switch(rec, LiveArm(copy=copy))
    label = rec.installed[f"copy_impl.{copy}"]
    counted = f"seq.{seq}.shm_copies_{label}"
    tensor = case.tensor()
    if sglang_known_failure(ARMS["sglang-torch"], case) is not None:  # SGLang rejects it under every arm
        with pytest.raises((RuntimeError, ValueError)):
            cls(tensor)
        assert counted not in rec.counters  # a construction that raised copied nothing
        return
    obj, called = c_calls(lambda: cls(tensor))
    assert CODE[label] <= called, f"copy={copy} ran {sorted(called)}"
    assert not CODE["torch" if label == "buffer" else "buffer"] & called, f"copy={copy} ran {sorted(called)}"
    back = pickle.loads(pickle.dumps(obj)).materialize()  # SGLang's own consumer side; unlinks the segment
    assert back.contiguous().view(torch.uint8).reshape(-1).numpy().tobytes() == case.expected_bytes()
    assert (back.dtype, tuple(back.shape)) == (case.dtype, case.expected_shape())
    assert rec.counters[counted] == 1


def test_thread_cap_is_applied_on_the_thread_that_copies(dispatched) -> None:
    """The cap reaches the copying thread (not the one that switched), and ``threads=None`` gives that thread back
    the count it had at the plugin's first copy."""
    cls, rec = dispatched
    main_threads = torch.get_num_threads()
    tensor = torch.arange(1 << 16, dtype=torch.float32)
    seen: list[int] = []
    errors: list[BaseException] = []
    steps = [threading.Event() for _ in range(3)]
    done = [threading.Event() for _ in range(3)]

    def copier() -> None:
        try:
            for step, finished in zip(steps, done, strict=True):
                assert step.wait(WAIT_S)
                obj = cls(tensor)
                seen.append(torch.get_num_threads())
                assert torch.equal(pickle.loads(pickle.dumps(obj)).materialize(), tensor)
                finished.set()
        except BaseException as exc:
            errors.append(exc)
            for finished in done:
                finished.set()

    worker = threading.Thread(target=copier)
    worker.start()
    for arm, step, finished in zip((LiveArm(copy="torch"), LiveArm(copy="torch", threads=1), LiveArm(copy="buffer")),
                                   steps, done, strict=True):
        switch(rec, arm)  # on this thread, as the proof thread switches
        step.set()
        assert finished.wait(WAIT_S)
    worker.join(WAIT_S)
    assert errors == []
    first = int(rec.installed["copy_threads_launch"])
    assert seen == [first, 1, first]
    assert torch.get_num_threads() == main_threads  # the switching thread was never capped
    assert rec.counters["copies_threads.1"] == 1

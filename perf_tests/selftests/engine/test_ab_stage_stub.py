"""The stage of an A/B's engines alive together (``--perf-ab-stage on``, ``isolation.pinning.Stage``), with stub
engines: at every visit the measured engine's whole tree is on the stage's CPUs and every idle one on the wings, and
the stage's null units go to an A/A history shape of their own."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine_fixtures.engine.factory import EngineFactory
from engine_fixtures.isolation.pinning import CpuSplit
from engine_fixtures.loadgen.stream import LoadStream
from engine_fixtures.machine import HostIdentity
from engine_fixtures.model.modeldir import write_model_dir
from engine_fixtures.options import Settings
from engine_fixtures.profile.report import ProfileBook
from engine_fixtures.quota import QuotaSetting
from engine_fixtures.scenarios.engine import EngineScenario
from engine_fixtures.scenarios.group import Arm, Contrast, Group
from engine_fixtures.scenarios.load import SessionLoad
from engine_fixtures.scenarios.runner import GroupRunner, RunnerEnv
from engine_fixtures.store.null_history import NullHistory
from perf_tests.support import launcher

STUB = launcher("stub_engine")
pytestmark = pytest.mark.usefixtures("no_steal_refusal")  # the windows are read here, not refused for steal


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model_dir(tmp_path_factory.mktemp("m") / "qwen-tiny", "tiny")


@pytest.fixture(scope="module")
def stream():  # type: ignore[no-untyped-def]
    with LoadStream() as s:
        yield s


def test_the_measured_member_is_on_the_stage_and_the_idle_ones_on_the_wings(
        model: Path, tmp_path: Path, stream: LoadStream, monkeypatch: pytest.MonkeyPatch) -> None:
    """An A/B's four engines (two builds, two replicas) alive together: at every visit the visited engine's whole tree
    runs on the stage's CPUs and every other engine's on the wings, so each is measured on the same CPUs beside the
    same neighbours. The 2-CPU box's stage is CPU 0, its wings CPU 1 (the real split wants 6 cores)."""
    from engine_fixtures.isolation import pinning
    from engine_fixtures.scenarios import runner as runner_module

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPUs: one for the stage, one for the wings")
    first, second = sorted(os.sched_getaffinity(0))[:2]
    monkeypatch.setattr(runner_module, "stage_split", lambda cpus, roles=False: pinning.Stage((first,), (second,)))
    seen: list[tuple[str, set[set[int]] | None, list[set[int]]]] = []
    real_segment = runner_module.measure_segment

    def affinities(engine) -> set[frozenset[int]]:  # type: ignore[no-untyped-def]
        return {frozenset(os.sched_getaffinity(int(t))) for pids in engine.pids().values() for p in pids
                for t in os.listdir(f"/proc/{p}/task")}

    def segment(engine, *args, **kwargs):  # type: ignore[no-untyped-def]
        others = [e for e in factory.live() if e is not engine]
        seen.append((engine.instance, affinities(engine), [a for e in others for a in affinities(e)]))
        return real_segment(engine, *args, **kwargs)

    monkeypatch.setattr(runner_module, "measure_segment", segment)
    settings = Settings(window_s=0.3, warmup_s=0.1, ab_blocks=1, ab_instances=1, ab_max_instances=1,
                        engine_cpus=(first, second), cpu_quota=QuotaSetting.parse("none"), ab_stage="on")
    launch = EngineScenario("stub", concurrency=4, output_tokens=12, launcher=STUB, proof=False, copy="buffer",
                            lint=False)
    group = Group("ab", arms=(Arm("reference", launch=launch), Arm("candidate", launch=launch)),
                  contrasts=(Contrast("candidate vs reference", "reference", "candidate", 1.0, ("tpot_gmean_ms",),
                                      report=()),))
    factory = EngineFactory(tmp_path / "engines", deadline_s=60.0, max_live=4)
    try:
        env = RunnerEnv(factory, SessionLoad(stream, settings, CpuSplit((first, second), None)), settings, model, None,
                        lambda _r: [], ProfileBook(), lambda key: tmp_path / f"{key}.json",
                        NullHistory(tmp_path, "m", HostIdentity.collect(())), "test#0")
        measured = GroupRunner(env).measure(group)
    finally:
        factory.close()
    assert len(seen) == 7  # one block of A B C D D C B A, its middle visits one segment
    assert len({inst for inst, _, _ in seen}) == 4
    for instance, own, others in seen:
        assert own == {frozenset({first})}, instance
        assert others, instance
        assert set(others) == {frozenset({second})}, instance
    result = measured.results["candidate"]
    assert result.metadata["stage"] == f"the measured engine on CPUs {first}; the idle ones parked on CPUs {second}"
    assert sum(1 for s in result.metadata["timeline"]["spans"] if s["kind"] == "stage") >= 4
    # its A/A history is its own: units measured with the idle members parked never pool with those measured beside
    assert [p.name for p in tmp_path.rglob("*.json") if "ab-null" in str(p)]
    assert all(
        "stage=on" in str(p) for p in tmp_path.rglob("*.json") if "ab-null" in str(p))

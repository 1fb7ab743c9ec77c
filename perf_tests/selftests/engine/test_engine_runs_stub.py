"""The engine tier's measuring loops against the stub engine (SGLang's HTTP surface, no GPU): a segment's
back-to-back windows become metrics, the history loop measures until decided, the A/B loop pairs blocks and
catches a slower build, and a client-bound segment is never recorded."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest

from engine_fixtures.engine.factory import EngineFactory
from engine_fixtures.engine.spec import EngineSpec
from engine_fixtures.errors import MeasurementError
from engine_fixtures.judge.verdicts import Verdict
from engine_fixtures.loadgen.stream import LoadStream
from engine_fixtures.model.modeldir import write_model_dir
from engine_fixtures.options import Settings
from engine_fixtures.scenarios.engine import EngineScenario
from engine_fixtures.scenarios.runs import SessionLoad, measure_ab, measure_history
from engine_fixtures.scenarios.segment import SegmentPlan, measure_segment
from engine_fixtures.scenarios.timeline import Timeline

STUB = ("-m", "engine_fixtures.testing.stub_engine")
SCENARIO = EngineScenario("stub", concurrency=4, output_tokens=16)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model_dir(tmp_path_factory.mktemp("m") / "qwen-tiny", "tiny")


def stub(model: Path, token_ms: float, name: str = "stub") -> EngineSpec:
    return EngineSpec(model, launcher=STUB, name=name, proof=False, extra_args=("--stub-token-ms", str(token_ms)))


@pytest.fixture(scope="module")
def stream():  # type: ignore[no-untyped-def]
    with LoadStream() as s:
        yield s


def load(stream: LoadStream, settings: Settings) -> SessionLoad:
    return SessionLoad(stream, settings)


def windows(engine, stream: LoadStream, scenario: EngineScenario, n: int = 2, window_s: float = 0.5):  # type: ignore[no-untyped-def]
    plan = SegmentPlan(scenario.workload(), n, window_s, 0.3)
    return measure_segment(engine, stream, plan, Timeline())


@pytest.fixture
def factory(tmp_path: Path):  # type: ignore[no-untyped-def]
    f = EngineFactory(tmp_path, deadline_s=60.0, max_live=2)
    try:
        yield f
    finally:
        f.close()


def test_a_window_yields_every_engine_metric(model: Path, factory: EngineFactory, stream: LoadStream) -> None:
    engine = factory.get(stub(model, 2.0))
    timeline = Timeline()
    ws = measure_segment(engine, stream, SegmentPlan(SCENARIO.workload(), 3, 0.5, 0.3), timeline)
    assert len(ws) == 3
    w = ws[0]
    kinds = [s.kind for s in timeline.spans]
    assert (kinds.count("window"), kinds.count("warmup"), kinds.count("drain")) == (3, 1, 1)
    spans = [s for s in timeline.spans if s.kind == "window"]
    assert all(b.t0 == pytest.approx(a.t1) for a, b in itertools.pairwise(spans))  # back to back, no pause
    assert w["achieved_concurrency"] == pytest.approx(4, rel=0.1)
    assert w["requests_per_s"] > 0
    assert w["tpot_p50_ms"] == pytest.approx(2.0, abs=1.5)
    assert w["cpu_s_per_request.http_server"] > 0  # the stub's root serves HTTP like SGLang's main process
    assert w["cpu_cores.scheduler"] == 0.0  # its scheduler-titled children idle: no CPU per request to judge
    assert "cpu_s_per_request.scheduler" not in w
    assert w["running_requests_max"] >= 1
    assert "cpu_s_per_request.total" not in w


def test_history_loop_measures_more_while_undecided(model: Path, factory: EngineFactory,
                                                    stream: LoadStream) -> None:
    engine = factory.get(stub(model, 2.0))
    looks: list[int] = []

    def judge(result, alpha):  # type: ignore[no-untyped-def]
        looks.append(len(result.samples["requests_per_s"]))
        status = "inconclusive" if len(looks) < 2 else "pass"
        return [Verdict("requests_per_s", status, "history", 1.0, 1.0, 0.0, None, 3, 3, "", "log")]

    settings = Settings(repeats=2, max_repeats=6, window_s=0.5, warmup_s=0.2)
    result = measure_history(engine, SCENARIO, settings, judge, load(stream, settings).windows, Timeline())
    assert looks == [2, 4]
    assert result.metadata["windows"] == 4
    assert result.metadata["window_instance"] == [engine.instance] * 4
    summary = result.metadata["timeline"]["summary"]
    assert summary["window_s"] == pytest.approx(2.0, abs=0.05)  # four windows of 0.5 s
    assert 0 < summary["measured_share_after_ready"] <= 1
    assert result.metadata["window_requests"] > 0
    assert result.metadata["alpha_per_look"] == pytest.approx(0.01 / 3)
    assert result.scenario.startswith("engine/transport=cpu/tp=1/pp=1/copy=stock/model=qwen-tiny/c=4")


def pairs(factory: EngineFactory, model: Path, ref_ms: float, cand_ms: float,  # type: ignore[no-untyped-def]
          offsets: tuple[float, ...] = (0.0,)):
    """Engine pair i: a reference at ``ref_ms`` and a candidate at ``cand_ms`` plus ``offsets[i % len]`` (what a
    fresh start of one build adds: +15.8 % TPOT between two instances on the H200)."""
    started: list[EngineSpec] = []

    def pair(i: int):  # type: ignore[no-untyped-def]
        for spec in started:
            factory.release(spec)
        cand = cand_ms + offsets[i % len(offsets)]
        started[:] = [stub(model, ref_ms, f"stub-ref{i}"), stub(model, cand, f"stub-cand{i}")]
        return factory.get(started[1]), factory.get(started[0])

    return pair


def test_ab_catches_a_slower_build_and_passes_an_identical_one(model: Path, factory: EngineFactory,
                                                              stream: LoadStream) -> None:
    settings = Settings(repeats=3, max_repeats=4, window_s=0.3, warmup_s=0.1)
    out = measure_ab(pairs(factory, model, 4.0, 6.0), SCENARIO, settings, load(stream, settings).windows, Timeline())
    by = {v.metric: v for v in out.verdicts}
    assert by["tpot_p50_ms"].status == "regression"
    assert by["tpot_p50_ms"].delta == pytest.approx(0.5, abs=0.2)
    assert "95% CI" in by["tpot_p50_ms"].message
    assert "one engine instance per build" in by["tpot_p50_ms"].message
    assert out.reference.scenario.endswith("/build=reference")
    out = measure_ab(pairs(factory, model, 4.0, 4.0), SCENARIO, settings, load(stream, settings).windows, Timeline())
    tpot = next(v for v in out.verdicts if v.metric == "tpot_p50_ms")
    assert tpot.status == "pass"  # the stub's token time is exact: the interval excludes the declared 10 %
    assert "A/B promise: 10.0% (excluded)" in tpot.message
    assert math.isfinite(tpot.delta)
    assert abs(tpot.delta) < 0.1


def test_ab_with_instance_pairs_makes_the_pair_the_unit(model: Path, factory: EngineFactory,
                                                        stream: LoadStream) -> None:
    settings = Settings(repeats=2, max_repeats=4, window_s=0.3, warmup_s=0.1, ab_blocks=1)
    out = measure_ab(pairs(factory, model, 4.0, 6.0), SCENARIO, settings, load(stream, settings).windows, Timeline(),
                     instances=2)
    tpot = next(v for v in out.verdicts if v.metric == "tpot_p50_ms")
    pairs_used = out.candidate.metadata["instance_pairs"]
    assert 2 <= pairs_used <= 4  # two first, more while any metric is undecided, at most twice as many
    assert tpot.windows == pairs_used  # one mean per instance pair, not one per block
    assert tpot.status == "regression"
    assert "one engine instance per build" not in tpot.message


def test_an_instance_offset_is_inside_the_interval_never_a_pass(model: Path, factory: EngineFactory,
                                                                stream: LoadStream) -> None:
    """Identical builds whose candidate instances alternate +0 and +25 % token time: blocks as the unit would
    call that significant; pairs as the unit see an offset between starts and cannot exclude 10 %."""
    settings = Settings(repeats=2, max_repeats=4, window_s=0.3, warmup_s=0.1, ab_blocks=1)
    out = measure_ab(pairs(factory, model, 4.0, 4.0, offsets=(0.0, 1.0)), SCENARIO, settings,
                     load(stream, settings).windows, Timeline(), instances=2)
    tpot = next(v for v in out.verdicts if v.metric == "tpot_p50_ms")
    assert tpot.windows == out.candidate.metadata["instance_pairs"]
    assert tpot.status == "inconclusive"
    assert "does not exclude the promised size" in tpot.message


def test_a_client_bound_segment_is_never_recorded(model: Path, factory: EngineFactory, stream: LoadStream) -> None:
    engine = factory.get(stub(model, 2.0))
    from dataclasses import replace

    impossible = replace(SCENARIO.workload(), min_achieved_fraction=1.0, concurrency=4)
    plan = SegmentPlan(replace(impossible, num_requests=4), 1, 0.3, 0.0)
    with pytest.raises(MeasurementError, match=r"the load client, not the engine, limited 3 segments in a row"):
        measure_segment(engine, stream, plan, Timeline())


def test_running_requests_show_the_pp_auto_cap(model: Path, factory: EngineFactory, stream: LoadStream) -> None:
    """The stub enforces SGLang's rule (max_running // pp per micro-batch); the window reads it from /metrics."""
    auto = EngineScenario("pp2-auto", pp=2, gpus=2, max_running_requests=8, concurrency=8, output_tokens=12,
                          launcher=STUB, proof=False, lint=False)
    explicit = EngineScenario("pp2-mb8", pp=2, gpus=2, max_running_requests=8, pp_max_micro_batch_size=8,
                              concurrency=8, output_tokens=12, launcher=STUB, proof=False)
    peaks = {}
    for s in (auto, explicit):
        engine = factory.get(s.spec(model, (0, 1)))
        peaks[s.id] = max(w["running_requests_max"] for w in windows(engine, stream, s, 2, 0.6))
    assert peaks == {"pp2-auto": 4.0, "pp2-mb8": 8.0}


def test_prepared_bodies_are_built_before_the_first_segment(model: Path, factory: EngineFactory) -> None:
    """prepare() lets the client encode the images while the engine starts; the segment then starts at once."""
    engine = factory.get(stub(model, 2.0))
    with LoadStream() as s:
        s.prepare(SCENARIO.workload())
        seg = s.segment(engine.url, SCENARIO.workload(), 0.1, 0.3)
        assert seg.records
        assert s.segments == 1

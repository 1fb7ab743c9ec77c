"""The engine tier's measuring loops against the stub engine (SGLang's HTTP surface, no GPU): a segment's
back-to-back windows become metrics, the history loop measures until decided, the A/B loop pairs blocks and
catches a slower build, a client-bound segment is never recorded, and a window the (fake) GPU was throttled in counts
toward no verdict and is a finding of the run."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from engine_fixtures.engine.factory import EngineFactory
from engine_fixtures.engine.group import start_group
from engine_fixtures.engine.running import running_requests
from engine_fixtures.engine.spec import EngineSpec
from engine_fixtures.errors import LeakError, MeasurementError, ProcessStartError
from engine_fixtures.judge.decide import NullSample
from engine_fixtures.judge.sequential import Budget
from engine_fixtures.judge.verdicts import Verdict
from engine_fixtures.loadgen.stream import LoadStream
from engine_fixtures.model.modeldir import write_model_dir
from engine_fixtures.options import Settings
from engine_fixtures.profile.report import ProfileBook
from engine_fixtures.quota import QuotaSetting
from engine_fixtures.scenarios.blocks_run import Judging, contrast_verdicts, measure, open_cells
from engine_fixtures.scenarios.engine import EngineScenario
from engine_fixtures.scenarios.group import Arm, Contrast, Group
from engine_fixtures.scenarios.load import SessionLoad
from engine_fixtures.scenarios.results import REFUSED_KEY
from engine_fixtures.scenarios.runner import GroupRunner, RunnerEnv
from engine_fixtures.scenarios.segment import SegmentPlan, measure_segment
from engine_fixtures.scenarios.timeline import Timeline
from engine_fixtures.store.null_history import NullHistory
from perf_tests.support import launcher
from perf_tests.support.fake_nvml import FakeNvml, fake_nvml

STUB = launcher("stub_engine")
pytestmark = pytest.mark.usefixtures("no_steal_refusal")  # the windows are read here, not refused for steal
SCENARIO = EngineScenario("stub", concurrency=4, output_tokens=16)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model_dir(tmp_path_factory.mktemp("m") / "qwen-tiny", "tiny")


def stub(model: Path, token_ms: float, name: str = "stub", proof: bool = False) -> EngineSpec:
    """The stub engine; ``proof``: with the suite's SGLang plugin loaded (its proofs, the running-batch probe)."""
    return EngineSpec(model, launcher=STUB, name=name, proof=proof, extra_args=("--stub-token-ms", str(token_ms)))


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


PER_SEGMENT = {"running_requests_max", "running_requests_mean", "client_loop_lag_p99_ms"}


def test_a_window_yields_every_engine_metric(model: Path, factory: EngineFactory, stream: LoadStream) -> None:
    """Per-window values in every window, the per-segment ones on the first window only (without the plugin, no
    proof: the client's loop lag alone; the running requests are test_history_loop_measures_more_while_undecided's)."""
    engine = factory.get(stub(model, 2.0))
    timeline = Timeline()
    requests: list[dict] = []
    ws = measure_segment(engine, stream, SegmentPlan(SCENARIO.workload(), 3, 0.5, 0.3), timeline, requests=requests)
    assert len(ws) == 3
    w = ws[0]
    assert set(w) & PER_SEGMENT == {"client_loop_lag_p99_ms"}
    assert all(not PER_SEGMENT & set(later) for later in ws[1:])
    kinds = [s.kind for s in timeline.spans]
    assert (kinds.count("window"), kinds.count("warmup"), kinds.count("drain")) == (3, 1, 1)
    spans = [s for s in timeline.spans if s.kind == "window"]
    assert all(b.t0 == pytest.approx(a.t1) for a, b in itertools.pairwise(spans))  # back to back, no pause
    # The warm-up runs until the windows start (after the requests sent in its first 0.3 s ended), the drain from
    # where they end; the stored requests of the first window hold none sent in those 0.3 s.
    (warmup,) = (s for s in timeline.spans if s.kind == "warmup")
    (drain,) = (s for s in timeline.spans if s.kind == "drain")
    assert warmup.t1 - warmup.t0 > 0.3
    assert (warmup.t1, drain.t0) == (spans[0].t0, pytest.approx(spans[-1].t1))
    assert [r["t0_s"] for r in requests] == [pytest.approx(s.t0 - warmup.t0, abs=1e-4) for s in spans]
    assert all(sent >= 0.3 for sent, *_ in requests[0]["rows"])
    assert w["achieved_concurrency"] == pytest.approx(4, rel=0.1)
    assert w["requests_per_s"] > 0
    assert w["tpot_p50_ms"] == pytest.approx(2.0, abs=1.5)
    assert w["cpu_s_per_request.http_server"] > 0  # the stub's root serves HTTP like SGLang's main process
    assert w["cpu_cores.detokenizer"] == 0.0  # its detokenizer-titled child idles: no CPU per request to judge
    assert "cpu_s_per_request.detokenizer" not in w
    assert "cpu_s_per_request.total" not in w


def test_a_launch_alone_is_measured_until_its_pool_verdicts_decide(model: Path, factory: EngineFactory,
                                                                   stream: LoadStream, tmp_path: Path) -> None:
    """The one runner on one launch (``Group.launch``): two segments of two windows on the stub with the plugin
    loaded, the second because the first look's pool verdict was undecided; the running requests are the scheduler's
    own count (a batch of all C requests), one value per segment on its first window (a visit is their unit)."""
    looks: list[int] = []

    def judge(result):  # type: ignore[no-untyped-def]
        looks.append(len(result.samples["requests_per_s"]))
        status = "inconclusive" if len(looks) < 2 else "pass"
        return [Verdict("requests_per_s", status, "history", 1.0, 1.0, 0.0, None, 3, 3, "", "log")]

    settings = Settings(repeats=2, max_repeats=6, window_s=0.5, warmup_s=0.2, cpu_quota=QuotaSetting.parse("none"))
    # the launch arm is proved before the engine is left: the buffer copy, which the stub's SHM copies then run
    launch = EngineScenario("stub", concurrency=4, output_tokens=16, copy="buffer", proof=True,
                            launcher=(*STUB, "--stub-image-kb", "16"))
    env = RunnerEnv(factory, load(stream, settings), settings, model, None, judge, ProfileBook(),
                    lambda key: tmp_path / f"{key}.json", NullHistory(tmp_path, "m", None), "test#0")
    measured = GroupRunner(env).measure(Group.launch(launch))
    result = measured.results["stub"]
    engine = factory.live()[0]
    assert looks == [2, 4, 4]  # two looks, then the final verdicts of the 4 windows
    assert result.metadata["blocks"] == 4  # a block of one arm is one window
    assert result.metadata["window_instance"] == [engine.instance] * 4
    for name in PER_SEGMENT:
        assert result.windows_of(name) == (0, 2), name
    assert result.samples["running_requests_max"] == (SCENARIO.concurrency,) * 2
    assert all(1 <= m <= SCENARIO.concurrency for m in result.samples["running_requests_mean"])
    assert result.aligned("window_instance", "running_requests_max") == [engine.instance] * 2
    assert len(result.samples["requests_per_s"]) == 4
    summary = result.metadata["timeline"]["summary"]
    assert summary["window_s"] == pytest.approx(2.0, abs=0.05)  # four windows of 0.5 s
    assert 0 < summary["measured_share_after_ready"] <= 1
    assert result.metadata["window_requests"] > 0
    assert result.metadata["alpha_per_look"] == pytest.approx(0.01 / 3)
    assert result.scenario.startswith("engine/transport=cpu/tp=1/pp=1/copy=buffer/model=qwen-tiny/c=4")


@pytest.mark.parametrize("throttled", [True, False], ids=["throttled", "unthrottled"])
def test_a_window_the_gpu_was_throttled_in_counts_toward_no_verdict_and_is_a_finding(
        model: Path, factory: EngineFactory, stream: LoadStream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        throttled: bool) -> None:
    """The runner on one launch with a fake NVML whose GPU 0 is at its power cap in every reading (or never) and does
    not report its power: two segments of two windows (the first look undecided). Throttled, every window keeps only
    its GPU telemetry, the pool judge sees no load metric, the segment's judged running requests are gone, each visit
    is a finding naming its windows and the reason, and NVML's missing power is said once; unthrottled, the windows
    are kept whole with their GPU state, and the only finding is the power."""
    fake_nvml(monkeypatch, FakeNvml(switch_after=0 if throttled else 10**9, power=False))
    judged: list[set[str]] = []

    def judge(result):  # type: ignore[no-untyped-def]
        judged.append(set(result.samples))
        status = "inconclusive" if len(judged) < 2 else "pass"
        return [Verdict("gpu_throttled_fraction", status, "history", 1.0, 1.0, 0.0, None, 3, 3, "", "log")]

    findings: list[str] = []
    settings = Settings(repeats=2, max_repeats=4, window_s=0.5, warmup_s=0.2, cpu_quota=QuotaSetting.parse("none"))
    launch = EngineScenario("stub", concurrency=4, output_tokens=16, copy="buffer", proof=True,
                            launcher=(*STUB, "--stub-image-kb", "16"))  # a launch arm the stub's proof can show
    env = RunnerEnv(factory, load(stream, settings), settings, model, None, judge, ProfileBook(),
                    lambda key: tmp_path / f"{key}.json", NullHistory(tmp_path, "m", None), "test#0",
                    on_finding=findings.append)
    result = GroupRunner(env).measure(Group.launch(launch)).results["stub"]
    assert result.samples["gpu_throttled_fraction"] == ((1.0,) if throttled else (0.0,)) * 4
    assert result.samples["gpu_temp_c_max"] == (80.0 if throttled else 60.0,) * 4  # GPU 0 only
    assert "gpu_power_w_mean" not in result.samples  # not reported: no number, never a zero
    power = [f for f in findings if f.startswith("GPU telemetry:")]
    assert power == ["GPU telemetry: NVML does not report the power of GPU 0 (NVML_ERROR_NOT_SUPPORTED): no "
                     "gpu.power_w numbers"]  # two segments, said once
    refusals = [f for f in findings if f not in power]
    spans = [s["label"] for s in result.metadata["timeline"]["spans"] if s["kind"] == "window"]
    if not throttled:
        assert {"requests_per_s", "ttft_p50_ms", "gpu_util_mean", "running_requests_max"} <= judged[-1]
        assert result.metadata[REFUSED_KEY] == {}
        assert refusals == []
        assert spans == ["window 1", "window 2"] * 2
        return
    assert all(name.startswith(("gpu_", "host_")) or name in ("running_requests_mean", "client_loop_lag_p99_ms")
               for name in judged[-1]), judged[-1]  # nothing judged reached the pool judge
    assert not {"gpu_util_mean", "running_requests_max"} & set(result.samples)
    assert result.samples["gpu_throttle_sw_power_cap"] == (1.0,) * 4
    why = ("the GPU was slowed by heat or power in 100% of its readings (sw_power_cap 100%), more than 5%; its SM "
           "clock 39.4% below the maximum")  # GPU 0: 1200 of 1980 MHz
    assert result.metadata[REFUSED_KEY] == dict.fromkeys(("0", "1", "2", "3"), why)
    assert spans == [f"window {k} refused: {why}" for k in (1, 2)] * 2
    engine = factory.live()[0]
    assert refusals == [f"stub/stub on {engine.instance}: 2 of 2 window(s) of a visit refused "
                        f"(window {first}: {why}; window {first + 1}: {why}); they count toward no verdict (a block "
                        "left without a window of an arm gives its contrasts no effect)" for first in (1, 3)]


AB = Group("ab", arms=(Arm("reference", launch=SCENARIO), Arm("candidate", launch=SCENARIO)),
           contrasts=(Contrast("candidate vs reference", "reference", "candidate", 1.0,
                               ("requests_per_s", "ttft_p50_ms", "tpot_gmean_ms"), report=()),))
(CONTRAST,) = AB.contrasts


def run_ab(factory: EngineFactory, model: Path, stream: LoadStream, settings: Settings, ref_ms: float,
           cand_ms: float, instances: int, offsets: tuple[float, ...] = (0.0,), null=None,  # type: ignore[no-untyped-def]
           most: int | None = None):
    """A group of a reference at ``ref_ms`` and a candidate at ``cand_ms`` plus ``offsets[g % len]`` (what a fresh
    start of one build adds: TPOT 3 % on the 4B shape, 14 % on tiny), each instance group started by
    ``start_group`` (one at a time, equal KV pools); judged as the group runner judges: ``instances`` groups, then one
    more while a cell is undecided, up to ``most`` (default: ``instances``, a fixed count)."""
    live: dict[str, object] = {}
    starts: list[list[str]] = []

    def start(g: int) -> None:
        for e in live.values():
            factory.release(e.spec)  # type: ignore[attr-defined]
        specs = [stub(model, ref_ms, f"stub-reference-g{g}"), stub(model, cand_ms + offsets[g % len(offsets)],
                                                                   f"stub-candidate-g{g}")]
        ref, cand = start_group(factory, specs, kv_tokens=4096)
        live.update(reference=ref, candidate=cand)
        starts.append([ref.instance, cand.instance])

    warmed: set[str] = set()

    def visit(member: str, n: int, _unit: int) -> list[dict[str, float]]:
        engine = live[member]
        # a fresh engine's first segment warms up 3x longer (the runner loads it to first light instead, 5 s each)
        first = engine.instance not in warmed  # type: ignore[attr-defined]
        warmed.add(engine.instance)  # type: ignore[attr-defined]
        plan = SegmentPlan(SCENARIO.workload(), n, settings.window_s, settings.warmup_s * (3.0 if first else 1.0))
        return measure_segment(engine, stream, plan, Timeline())  # type: ignore[arg-type]

    def undecided(windows, block_unit, alpha):  # type: ignore[no-untyped-def]
        return open_cells(AB, windows, block_unit, Judging(alpha, 2 * instances, null_for=lambda _c, _m: null))

    run = measure(AB, Budget(instances, 1, most or instances), visit, undecided, start=start,
                  blocks_per_unit=settings.ab_blocks)
    verdicts = {v.metric: v for v in contrast_verdicts(AB, CONTRAST, run.windows, run.block_unit,
                                                       Judging(run.alpha_per_look, run.budget_units,
                                                               null_for=lambda _c, _m: null))}
    return run, verdicts, live


def test_ab_catches_a_slower_build_and_passes_an_identical_one(model: Path, factory: EngineFactory,
                                                              stream: LoadStream) -> None:
    """One fresh pair each, the between-pair spread (2.5 %) borrowed from this host's A/A history."""
    settings = Settings(window_s=0.3, warmup_s=0.1, ab_blocks=1)
    null = NullSample.of([0.025, -0.025, 0.02, -0.02, 0.03, -0.03], "the test's A/A history")
    run, by, _ = run_ab(factory, model, stream, settings, 4.0, 6.0, instances=1, null=null)
    assert by["tpot_gmean_ms"].status == "regression"
    assert by["tpot_gmean_ms"].delta == pytest.approx(0.5, abs=0.2)
    assert "95% CI" in by["tpot_gmean_ms"].message
    assert by["tpot_gmean_ms"].windows == run.units == 1  # one mean per fresh pair, not one per block
    # An identical build, measured as the runner measures (--perf-ab-instances 1, --perf-ab-max-instances 3): a pair
    # that a hiccup of the shared 2-core box put 3-4 % apart (1 run in 20 or so: sd 1-2 % per pair, heavy-tailed)
    # is inconclusive at the first look, and the next pair decides it.
    run, by, _ = run_ab(factory, model, stream, settings, 4.0, 4.0, instances=1, null=null, most=3)
    tpot = by["tpot_gmean_ms"]
    assert tpot.status == "pass", tpot.message
    assert "variance pooled with 6 null pair(s) of the test's A/A history" in tpot.message
    assert f"catches {tpot.detectable:.1%} worse" in tpot.message


def test_an_instance_offset_is_inside_the_interval_never_a_pass(model: Path, factory: EngineFactory,
                                                                stream: LoadStream) -> None:
    """Identical builds whose candidate instances alternate +0 and +25 % token time: blocks as the unit would
    call that significant; pairs as the unit see an offset between starts and cannot promise 20 %."""
    settings = Settings(window_s=0.3, warmup_s=0.1, ab_blocks=1)
    run, by, _ = run_ab(factory, model, stream, settings, 4.0, 4.0, instances=2, offsets=(0.0, 1.0))
    tpot = by["tpot_gmean_ms"]
    assert tpot.windows == run.units
    assert tpot.status == "inconclusive"
    assert "t with" in tpot.message


def test_a_group_starts_its_members_one_at_a_time_with_equal_pools(model: Path, factory: EngineFactory) -> None:
    specs = [stub(model, 2.0, "stub-a"), stub(model, 2.0, "stub-b")]
    frees = iter([(1000.0, 1000.0), (1000.0, 600.0)])
    a, b = start_group(factory, specs, kv_tokens=4096, memory=lambda _gpu: next(frees))
    assert a.config.max_total_num_tokens == b.config.max_total_num_tokens == 4096
    assert (a.spec.mem_fraction_static, b.spec.mem_fraction_static) == (0.425, 0.708)  # an equal share of the GPU
    assert b.ready_s is not None
    for e in (a, b):
        factory.release(e.spec)
    short = [stub(model, 2.0, "stub-c"), stub(model, 2.0, "stub-d").with_(
        extra_args=("--stub-token-ms", "2", "--stub-kv-short", "100"))]
    with pytest.raises(MeasurementError, match="different pools"):
        start_group(factory, short, kv_tokens=4096, memory=lambda _gpu: None)
    assert factory.live() == ()  # the refused group was stopped


def test_a_failed_member_start_blames_no_live_sibling(model: Path, factory: EngineFactory) -> None:
    specs = [stub(model, 2.0, "stub-ok"), stub(model, 2.0, "stub-dies").with_(
        extra_args=("--stub-mode", "crash-before-ready"))]
    with pytest.raises(ProcessStartError) as err:
        start_group(factory, specs, kv_tokens=4096, memory=lambda _gpu: None)
    assert not isinstance(err.value, LeakError)
    assert factory.live() == ()  # the sibling that started was stopped, and its stop found no leak


def test_a_client_bound_segment_is_never_recorded(model: Path, factory: EngineFactory, stream: LoadStream) -> None:
    engine = factory.get(stub(model, 2.0))
    from dataclasses import replace

    impossible = replace(SCENARIO.workload(), min_achieved_fraction=1.0, concurrency=4)
    plan = SegmentPlan(replace(impossible, num_requests=4), 1, 0.3, 0.0)
    with pytest.raises(MeasurementError, match=r"the load client, not the engine, limited 3 segments in a row"):
        measure_segment(engine, stream, plan, Timeline())


def test_running_requests_show_the_pp_auto_cap(model: Path, factory: EngineFactory, stream: LoadStream) -> None:
    """The stub enforces SGLang's rule (max_running // pp per micro-batch); the segment reads it from the scheduler's
    own count of every batch, in both PP ranks, whose max is one micro-batch, never the sum over the two."""
    auto = EngineScenario("pp2-auto", pp=2, gpus=2, max_running_requests=8, concurrency=8, output_tokens=12,
                          launcher=STUB, lint=False)
    explicit = EngineScenario("pp2-mb8", pp=2, gpus=2, max_running_requests=8, pp_max_micro_batch_size=8,
                              concurrency=8, output_tokens=12, launcher=STUB)
    peaks = {}
    for s in (auto, explicit):
        engine = factory.get(s.spec(model, (0, 1)))
        before = engine.proof()
        ws = windows(engine, stream, s, 2, 0.6)
        assert "running_requests_max" not in ws[1]  # one value per segment
        peaks[s.id] = ws[0]["running_requests_max"]
        counted = running_requests(before, engine.proof())
        assert counted is not None
        assert (counted.processes, counted.max) == (2, peaks[s.id])  # both stages counted; the max is not summed
    assert peaks == {"pp2-auto": 4.0, "pp2-mb8": 8.0}


def test_prepared_bodies_are_built_before_the_first_segment(model: Path, factory: EngineFactory) -> None:
    """prepare() lets the client encode the images while the engine starts; the segment then starts at once."""
    engine = factory.get(stub(model, 2.0))
    with LoadStream() as s:
        s.prepare(SCENARIO.workload())
        seg = s.segment(engine.url, SCENARIO.workload(), 0.1, 0.3)
        assert seg.records
        assert s.segments == 1

"""The A/B of two builds serving the arms a user runs (``Group.ab_of(arms=)``), with stub engines: each build's
engines serve every arm, switched live and proved at each visit, and each arm is its own contrast of the builds. A
candidate whose slowdown is confined to one arm (the stub's torch copy 40 ms slower, set by the build's environment)
is flagged on that arm's row, the arm that does not run it is not; four engines serve three arms (two builds, two
replicas), never one engine per arm; the builds are profiled once, on the first arm that asks; and each arm's
same-build pairs go to an A/A history shape of its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine_fixtures.engine.build import EngineBuild
from engine_fixtures.engine.factory import EngineFactory
from engine_fixtures.errors import ConfigError
from engine_fixtures.isolation.pinning import CpuSplit
from engine_fixtures.loadgen.stream import LoadStream
from engine_fixtures.machine import HostIdentity
from engine_fixtures.model.modeldir import write_model_dir
from engine_fixtures.options import Settings
from engine_fixtures.profile.report import ProfileBook
from engine_fixtures.quota import QuotaSetting
from engine_fixtures.scenarios.engine import EngineScenario
from engine_fixtures.scenarios.group import Arm, Group
from engine_fixtures.scenarios.load import SessionLoad
from engine_fixtures.scenarios.runner import GroupRunner, RunnerEnv
from engine_fixtures.store.null_history import NullHistory
from perf_tests.support import STEAL

pytest_plugins = ("pytester",)
pytestmark = pytest.mark.usefixtures("no_steal_refusal")  # the windows are read here, not refused for steal
STUB = ("-m", "perf_tests.support.stub_engine", "--stub-image-kb", "16")
LAUNCH = EngineScenario("stub", concurrency=2, output_tokens=8, launcher=STUB, copy="buffer", lint=False)
ARMS = (Arm("buffer", copy="buffer"), Arm("torch", copy="torch"), Arm("torch-capped", copy="torch", threads=1))
REFERENCE = EngineBuild("reference")
SLOW_TORCH = EngineBuild("slow-torch", env=(("STUB_TORCH_COPY_MS", "40"),))


def test_the_ab_group_declares_an_engine_per_build_and_a_contrast_per_arm() -> None:
    group = Group.ab_of(LAUNCH, REFERENCE, SLOW_TORCH, arms=ARMS).with_replicas(2)
    assert [c.label for c in group.contrasts] == [f"{a.name}: candidate vs reference" for a in ARMS]
    assert group.engines == ("reference@1", "reference@2", "candidate@1", "candidate@2")
    assert group.switched
    assert group.engine_of("candidate.torch@2") == "candidate@2"
    spec = LAUNCH.spec(Path("/m/qwen"), (0,), SLOW_TORCH)
    ref = group.key(spec, group.arm("reference.torch"), None)
    cand = group.key(spec, group.arm("candidate.torch"), None)
    assert "copy=torch" in cand
    assert ref == cand + "/build=reference"
    with pytest.raises(ConfigError, match="live axes only"):
        Group.ab_of(LAUNCH, REFERENCE, SLOW_TORCH, arms=(Arm("c1", concurrency=1),))
    with pytest.raises(ConfigError, match="share engine"):
        Group("g", arms=(Arm("a", launch=LAUNCH, engine="e"), Arm("b", launch=LAUNCH, build=SLOW_TORCH, engine="e")))
    with pytest.raises(ConfigError, match="IPC cache"):
        Group("g", arms=(Arm("a", launch=LAUNCH, ipc_cache="on"), Arm("b", launch=LAUNCH)))


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model_dir(tmp_path_factory.mktemp("m") / "qwen-tiny", "tiny")


def test_a_slowdown_of_one_arm_is_flagged_on_that_arm_alone(model: Path, tmp_path: Path) -> None:
    settings = Settings(window_s=0.4, warmup_s=0.1, ab_blocks=2, ab_instances=1, ab_max_instances=1,
                        cpu_quota=QuotaSetting.parse("none"), profile="always")
    factory = EngineFactory(tmp_path / "engines", deadline_s=60.0, max_live=4)
    history = NullHistory(tmp_path, "m", HostIdentity.collect(()))
    try:
        with LoadStream() as stream:
            env = RunnerEnv(factory, SessionLoad(stream, settings, CpuSplit(None, None)), settings, model, None,
                            lambda _r: [], ProfileBook(), lambda key: tmp_path / f"{key}.json", history, "test#0")
            measured = GroupRunner(env).measure(Group.ab_of(LAUNCH, REFERENCE, SLOW_TORCH, arms=ARMS))
    finally:
        factory.close()
    rows = {label: {v.metric: v for v in vs} for label, vs in measured.contrasts.items()}
    torch = rows["torch: candidate vs reference"]
    assert torch["requests_per_s"].status == "regression", torch["requests_per_s"].message
    assert torch["requests_per_s"].delta < -0.2  # 40 ms more a request at C=2
    # the buffer arm does not carry the torch arm's slowdown: its change in req/s is a small part of the torch arm's
    # (whether a null row of stub engines on a busy 2-core box is ever flagged is the judge's false-alarm rate, which
    # the simulations measure, not this test: one CI run flagged a buffer row of this null)
    buffer = rows["buffer: candidate vs reference"]
    assert abs(buffer["requests_per_s"].delta) < 0.25 * abs(torch["requests_per_s"].delta), buffer["requests_per_s"]
    # four engines (two builds, two replicas) served the three arms, each visit proved on its own arm
    engines = {i for r in measured.results.values() for i in r.metadata["engine_instances"]}
    assert len(engines) == 4 * measured.run.units
    for name, result in measured.results.items():
        arm = name.split(".", 1)[1]
        assert f"copy={ 'buffer' if arm == 'buffer' else 'torch'}" in result.scenario, result.scenario
        assert result.scenario.endswith("/build=reference") == name.startswith("reference.")
    assert "threads=1" in measured.results["candidate.torch-capped"].scenario
    # one pair of builds: profiled once, on the first arm that asked; the others say so rather than profile again
    assert measured.profiles["torch: candidate vs reference"] == (
        "(the builds were profiled on the first arm that asked: buffer: candidate vs reference)")
    # each arm's same-build pairs: an A/A history shape of its own
    shapes = sorted(p.name for p in tmp_path.rglob("*.json") if "ab-null" in str(p))
    assert len(shapes) == 3, shapes
    assert any("threads=1" in s for s in shapes), shapes


TEST_FILE = """
import pytest
from engine_fixtures import Arm, EngineScenario

STUB = ("-m", "perf_tests.support.stub_engine", "--stub-image-kb", "16")
LAUNCH = EngineScenario("stub", concurrency=2, output_tokens=8, launcher=STUB, copy="buffer", lint=False)

@pytest.mark.ab
@pytest.mark.perf
def test_ab(perf_gpu_tier):
    rows = perf_gpu_tier(LAUNCH, arms=(Arm("buffer", copy="buffer"), Arm("torch", copy="torch"),
                                       Arm("torch-quota", copy="torch", quota=1.0)))
    assert {r.metric for r in rows} >= {"requests_per_s", "tpot_gmean_ms"}
"""


def test_the_ab_fixture_ends_on_every_arm_and_says_which_it_left_out(pytester: pytest.Pytester) -> None:
    """Through pytest: a null A/B serving two arms (the quota arm left out under --perf-cpu-quota none, saying so),
    each arm's rows in the terminal under its own label, the test ended once over all of them."""
    pytester.makepyfile(test_ab=TEST_FILE)
    r = pytester.runpytest_subprocess(
        "-rs", "-p", "no:cacheprovider", "--perf-baseline-dir", str(pytester.path / "bl"), "--perf-results-dir",
        str(pytester.path / "out"), "--perf-model-shape", "tiny", "--perf-window-s", "0.4", "--perf-warmup-s", "0.1",
        "--perf-ab-blocks", "2", "--perf-ab-max-instances", "1", "--perf-strict", "no", "--perf-cpu-quota", "none",
        "--perf-reference", "installed", "--perf-profile", "off", *STEAL, timeout=600)
    outcomes = r.parseoutcomes()
    # a null of two stub builds on a busy 2-core box: whether it passes is a false-alarm rate, not asserted here (the
    # engines' own offsets read as an "improvement" once in CI); a failure must be a verdict, never an error
    assert outcomes.get("errors", 0) == 0, r.stdout.str()[-3000:]
    assert sum(outcomes.get(k, 0) for k in ("passed", "skipped", "failed")) == 1, r.stdout.str()[-3000:]
    if outcomes.get("failed", 0):
        r.stdout.fnmatch_lines(["*InvariantViolated: performance invariant violated*"])
    r.stdout.fnmatch_lines(["*the A/B left out torch-quota: CPU quotas are disabled (--perf-cpu-quota none*"])
    out = r.stdout.str()
    assert "buffer: candidate vs reference" in out
    assert "torch: candidate vs reference" in out
    assert "torch-quota: candidate" not in out


def _tier(settings: Settings):  # type: ignore[no-untyped-def]
    from types import SimpleNamespace

    from engine_fixtures.session.gpu_tier import GpuTier

    tier = GpuTier.__new__(GpuTier)
    tier.session = SimpleNamespace(settings=settings, findings=[])
    return tier


DECLARED = (Arm("buffer", copy="buffer"), Arm("torch", copy="torch"), Arm("torch-quota", copy="torch", quota=1.0))


def test_ab_arms_selects_the_named_arms_and_says_which_it_left_out() -> None:
    """``--perf-ab-arms``: the arms named, in the test's order; those left out are a finding; unset: every arm; a
    test that declares no arms runs its launch whatever the option names."""
    tier = _tier(Settings(ab_arms=("torch-quota", "buffer"), sources={"ab_arms": "command line --perf-ab-arms"}))
    assert [a.name for a in tier._selected(DECLARED)] == ["buffer", "torch-quota"]
    assert tier.session.findings == ["the A/B left out torch: --perf-ab-arms torch-quota,buffer"]
    assert tier._selected(()) == ()
    assert _tier(Settings())._selected(DECLARED) == DECLARED


def test_ab_arms_naming_an_arm_the_test_lacks_is_an_error_naming_its_arms() -> None:
    tier = _tier(Settings(ab_arms=("bufer",), sources={"ab_arms": "PERF_AB_ARMS environment variable"}))
    with pytest.raises(ConfigError, match=r"--perf-ab-arms names bufer, which this test does not declare: its arms "
                                          r"are buffer, torch, torch-quota \(from PERF_AB_ARMS environment variable\)"):
        tier._selected(DECLARED)

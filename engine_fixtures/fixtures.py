"""Every pytest fixture of the suite, as thin glue over the library (the ``perf_fixtures`` pytest11 plugin).

Settings and isolation:
- ``perf_settings`` (session): the resolved ``--perf-*`` options (frozen ``options.Settings``).
- ``cgroup_support`` (session): None if CPU quotas work here, else the reason (fact and fix).
- ``cpu_quota_factory``: ``make(cores, *, name=..., root=...) -> CpuQuota`` returns an *entered* sandbox;
  every one is closed (processes killed, cgroup removed) at teardown, also when the test failed. Skips
  with the probe reason where quotas are impossible.
- ``leak_check``: fails the test if it leaked a /dev/shm segment, a descendant process or a ``perf-*``
  cgroup (what leaked is cleaned up).

Engine:
- ``perf_model_dir`` (session): ``--perf-model`` if given (validated), else a generated dummy-weight dir.
- ``engine_factory`` (session): starts or reuses engines by ``EngineSpec.launch_key`` (a new quota is set on
  the live engine's cgroup); stops all of them at session end (leak-checked).
- ``perf_load`` (session): the one load client of the session, pinned apart from the engines.
- ``engine``: parametrised indirectly, ``@pytest.mark.parametrize("engine", [spec_or_overrides],
  indirect=True)``, where the parameter is an ``EngineSpec`` or a dict of its fields (``model`` defaults
  to ``perf_model_dir``, ``gpus`` to ``--perf-gpus``); see ``session.params``. A failing test that used it
  shows section "engine log (tail)".

Judging:
- ``perf_record(result) -> list[Verdict]``: records and judges a ``RunResult`` against this machine's
  baseline (``session.recorder.PerfRecorder``); a failing test shows section "perf verdicts".
- ``perf_invariant(label, metric, reference, current, bound) -> Verdict``: a same-run invariant between arms, per
  round (``reference``/``current`` are RunResults or sample sequences); ``perf_invariant.check(contrast)`` judges a
  declared ``Contrast`` of the CPU tier's arms, or a ``CounterBound``, from this session's results.

Scenarios:
- ``perf_results`` (session): this session's measured results by arm id (``scenarios.registry``).
- ``perf_cpu_tier(scenario) -> {arm id: RunResult}`` (session): measures a ``CpuTierScenario`` once per session,
  until its verdicts are decided; the control arm is recorded as the machine's yardstick (diagnostics).
- ``perf_gpu_tier``: the GPU tier (``session.gpu_tier``): ``perf_gpu_tier(scenario)`` one launch against this host's
  pool (the A/B of two builds with ``--perf-reference``); ``.check(group, contrast)``, ``.arm(group, name)``,
  ``.counter(group, bound)``, ``.figure(seed_figure)`` for a declared ``Group`` (arms switched live on one engine, or
  launches of their own such as the transport).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from engine_fixtures.engine.factory import EngineFactory
from engine_fixtures.engine.handle import EngineHandle
from engine_fixtures.engine.spec import EngineSpec, with_quota_setting
from engine_fixtures.errors import ConfigError, NotApplicable
from engine_fixtures.isolation.cgroups import CpuQuota, probe_quota_support
from engine_fixtures.isolation.leaks import LeakSnapshot, no_leaks
from engine_fixtures.isolation.pinning import cpu_split
from engine_fixtures.loadgen.stream import LoadStream
from engine_fixtures.model.modeldir import check_model_dir, write_model_dir
from engine_fixtures.options import Settings
from engine_fixtures.scenarios.load import SessionLoad
from engine_fixtures.session import sections
from engine_fixtures.session.gpu_tier import GpuTier
from engine_fixtures.session.params import spec_from_param
from engine_fixtures.session.perf_session import get_session
from engine_fixtures.session.recorder import InvariantJudge, PerfRecorder, session_verdicts
from engine_fixtures.session.registry import ScenarioResults, results_of
from engine_fixtures.session.settings import SETTINGS_KEY

if TYPE_CHECKING:
    from engine_fixtures.scenarios.cpu_tier import CpuTierScenario

QuotaFactory = Callable[..., CpuQuota]
CONTROL_WHY = ("the control arm: its numbers are this machine's speed today, which the other arms' rel.* "
               "ratios divide out")


@pytest.fixture(scope="session")
def perf_settings(pytestconfig: pytest.Config) -> Settings:
    """The session's resolved ``--perf-*`` options (frozen)."""
    return pytestconfig.stash[SETTINGS_KEY]


# ---------------------------------------------------------------------------------------------- isolation
@pytest.fixture(scope="session")
def cgroup_support() -> str | None:
    """Why CPU quotas cannot be applied here, or None (probed once per session)."""
    return probe_quota_support()


@pytest.fixture
def cpu_quota_factory(cgroup_support: str | None) -> Iterator[QuotaFactory]:
    """Make entered ``CpuQuota`` sandboxes that are all torn down after the test."""
    if cgroup_support is not None:
        pytest.skip(cgroup_support)
    with contextlib.ExitStack() as stack:

        def make(cores: float | None, *, name: str = "perf", root: Path | None = None) -> CpuQuota:
            return stack.enter_context(CpuQuota(cores, name=name, root=root))

        yield make


@pytest.fixture
def leak_check() -> Iterator[LeakSnapshot]:
    """Fail the test (at teardown) if it leaked a /dev/shm segment, a descendant or a ``perf-*`` cgroup;
    what leaked is cleaned up. Request it before other fixtures so their teardown runs first."""
    with no_leaks() as before:
        yield before


# ---------------------------------------------------------------------------------------------- engine
@pytest.fixture(scope="session")
def perf_model_dir(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``--perf-model`` if given (validated), else a generated dummy-weight dir of ``--perf-model-shape``."""
    settings = pytestconfig.stash[SETTINGS_KEY]
    if settings.model is not None:
        check_model_dir(Path(settings.model))
        return Path(settings.model)
    return write_model_dir(tmp_path_factory.mktemp("models") / f"qwen-{settings.model_shape}", settings.model_shape)


@pytest.fixture(scope="session")
def engine_factory(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory,
                   cgroup_support: str | None) -> Iterator[EngineFactory]:
    """Starts or reuses engines by launch; stops all of them at session end (leak-checked). Where quotas work,
    every engine gets a cgroup sandbox, so a scenario with another quota reuses the live engine."""
    settings = pytestconfig.stash[SETTINGS_KEY]
    session = get_session(pytestconfig)
    factory = EngineFactory(tmp_path_factory.mktemp("engines"), settings.engine_timeout,
                            on_finding=session.findings.append, sandbox=cgroup_support is None,
                            state_dir=settings.state_dir)  # one engine live at a time, or one group (engine.group)
    try:
        yield factory
    finally:
        factory.close()


@pytest.fixture
def engine(request: pytest.FixtureRequest, engine_factory: EngineFactory) -> EngineHandle:
    """A ready engine for the test's parameter (shared with other tests asking for the same spec)."""
    param = getattr(request, "param", None)
    if param is None:
        raise ConfigError("the engine fixture must be parametrised indirectly with an EngineSpec")
    settings = request.config.stash[SETTINGS_KEY]
    needs_model = not isinstance(param, EngineSpec) and "model" not in param
    model = request.getfixturevalue("perf_model_dir") if needs_model else Path()
    spec = spec_from_param(param, model, settings.gpus)
    try:
        spec = with_quota_setting(spec, settings.cpu_quota, settings.sources["cpu_quota"])
    except NotApplicable as exc:
        pytest.skip(str(exc))
    handle = engine_factory.get(spec)
    sections.add_on_failure(request.node, "engine log (tail)", handle.log_tail)
    return handle


# ---------------------------------------------------------------------------------------------- scenarios
@pytest.fixture(scope="session")
def perf_results(pytestconfig: pytest.Config) -> ScenarioResults:
    """This session's measured results by arm id (what cross-arm invariants read)."""
    return results_of(pytestconfig)


@pytest.fixture(scope="session")
def perf_cpu_tier(pytestconfig: pytest.Config, perf_results: ScenarioResults) -> Callable[..., dict]:
    """``perf_cpu_tier(scenario)``: the ``CpuTierScenario``'s results by arm id, measured once per session."""
    session = get_session(pytestconfig)

    def run(scenario: CpuTierScenario) -> dict:
        from engine_fixtures.profile.cpu_tier import after_verdicts  # matplotlib and the rigs: only when measuring
        from engine_fixtures.scenarios import cpu_tier  # torch: imported by the tests that measure, not by every run

        cached = perf_results.cached_set(scenario.name)
        if cached is None:
            judge = lambda r, a: session_verdicts(session, r, a)  # noqa: E731
            after = after_verdicts(scenario, session.settings, judge, session.profiles, session.store.path_for,
                                   Path(session.settings.results_dir) / "profiles")
            cached = cpu_tier.measure(scenario, session.settings, judge, after)
            perf_results.put_set(scenario.name, cached)
            if scenario.control is not None:
                session.record_diagnostic(cached[scenario.control.id], CONTROL_WHY)
        return cached

    return run


@pytest.fixture(scope="session")
def perf_load(pytestconfig: pytest.Config) -> Iterator[SessionLoad]:
    """The session's one load client (``loadgen.stream.LoadStream``) on its own CPUs (``--perf-engine-cpus``,
    ``--perf-client-cpus``), and the window plan; stopped at session end."""
    settings = pytestconfig.stash[SETTINGS_KEY]
    split = cpu_split(settings.engine_cpus, settings.client_cpus)
    with LoadStream(cpus=split.client) as stream:
        yield SessionLoad(stream, settings, split)


@pytest.fixture
def perf_gpu_tier(request: pytest.FixtureRequest, engine_factory: EngineFactory, perf_record: PerfRecorder,
                  perf_results: ScenarioResults, perf_load: SessionLoad) -> GpuTier:
    """``perf_gpu_tier(scenario)``, ``.check(group, contrast)``, ``.arm(group, name)``, ``.counter(group, bound)``,
    ``.figure(seed_figure)`` (``session.gpu_tier``)."""
    return GpuTier(request, engine_factory, perf_record, perf_results, request.getfixturevalue("perf_model_dir"),
                   perf_load)


# ---------------------------------------------------------------------------------------------- judging
@pytest.fixture
def perf_record(request: pytest.FixtureRequest) -> PerfRecorder:
    """Judge a ``RunResult`` against this machine's baseline; see ``session.recorder``."""
    return PerfRecorder(get_session(request.config), request.node)


@pytest.fixture
def perf_invariant(perf_record: PerfRecorder, perf_results: ScenarioResults) -> InvariantJudge:
    """``perf_invariant(label, metric, reference, current, bound) -> Verdict``; ``.check(contrast)``."""
    return InvariantJudge(perf_record, perf_results)

"""pytest hooks of the suite. Hooks only: every behaviour lives in a library module."""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import replace

import pytest

from engine_fixtures import options
from engine_fixtures.engine.build import STORED_IF_KEPT
from engine_fixtures.errors import ConfigError, PerfError
from engine_fixtures.session import marks, preflight, sections
from engine_fixtures.session import settings as perf_settings

_MACHINE_KEY = pytest.StashKey[object]()
_SKIP_CACHE_KEY = pytest.StashKey[dict[tuple[str, object], str | None]]()
_NO_KEPT_REFERENCE_KEY = pytest.StashKey[str | None]()  # why --perf-reference stored-if-kept found no kept build
_NIGHTLY_AB_KEY = pytest.StashKey[bool]()  # stored-if-kept: the one-build tests run beside the A/B


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("perf", "SGLang serving performance suite")
    options.add_options(group.addoption)
    perf_settings.add_ini(parser)


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    for signature, text in marks.MARKERS.items():
        config.addinivalue_line("markers", f"{signature}: {text}")
    try:
        settings = perf_settings.settings_from_config(config)
    except PerfError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[perf_settings.SETTINGS_KEY] = settings
    config.stash[_SKIP_CACHE_KEY] = {}
    if settings.require_sglang and (problem := marks.require_sglang(settings.require_sglang)) is not None:
        raise pytest.UsageError(problem)
    if settings.require_gpu and (problem := marks.require_gpu_problem(settings.require_gpu)) is not None:
        raise pytest.UsageError(problem)

    from engine_fixtures.isolation.cgroups import configure_parent, configured_parent
    from engine_fixtures.machine import MachineInfo
    from engine_fixtures.session.perf_session import install_session
    from engine_fixtures.session.run_guard import install_run_guard

    machine = MachineInfo.collect()
    try:
        preflight.check(settings, machine.key)  # before anything is swept, locked, started or written
        config.stash[_NIGHTLY_AB_KEY] = settings.reference is not None and settings.reference.label == STORED_IF_KEPT
        if (absent := preflight.kept_reference_absent(settings, machine.key)) is not None:
            settings = replace(settings, reference=None)  # stored-if-kept, none kept: the ab tests skip, saying so
        config.stash[_NO_KEPT_REFERENCE_KEY] = absent
        settings = preflight.resolve_builds(settings, machine.key)  # --perf-reference stored: the kept build
    except PerfError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[perf_settings.SETTINGS_KEY] = settings
    previous = configured_parent()
    config.add_cleanup(lambda: configure_parent(previous))  # a pytester session may run in this process
    configure_parent(settings.cgroup_parent)
    from engine_fixtures.scenarios.refusal import configure_steal

    steal = configure_steal(settings.max_steal)
    config.add_cleanup(lambda: configure_steal(steal))
    guard = install_run_guard(config)
    config.stash[_MACHINE_KEY] = machine
    session = install_session(config, machine_key=machine.key, machine=machine.as_dict())
    preflight.scan_pools(session)
    if guard is not None and guard.report:
        session.findings.append(guard.report.line().removeprefix("perf "))


def pytest_report_header(config: pytest.Config) -> list[str]:
    machine = config.stash.get(_MACHINE_KEY, None)
    settings = config.stash[perf_settings.SETTINGS_KEY]
    lines = list(machine.header_lines()) if machine is not None else []
    changed = [f"{name}={options.display(getattr(settings, name), options.OPTIONS_BY_NAME[name])} ({src})"
               for name, src in settings.sources.items() if not src.startswith("default")]
    lines.append("perf options: " + (", ".join(changed) if changed else "all defaults"))
    from engine_fixtures.session.run_guard import header_lines

    return lines + header_lines(config) + preflight.header_lines(config)


def _cached_reason(config: pytest.Config, key: tuple[str, object], compute) -> str | None:
    cache = config.stash[_SKIP_CACHE_KEY]
    if key not in cache:
        cache[key] = compute()
    return cache[key]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip what cannot run here, each with a reason that states the fact and the fix."""
    settings = config.stash[perf_settings.SETTINGS_KEY]
    bad = [e for item in items for e in marks.marker_errors(item)]
    if bad:
        raise pytest.UsageError("invalid perf suite markers:\n" + "\n".join(bad))
    xdist = marks.xdist_reason(config)
    if (refusal := marks.cpu_tier_refusal(settings, items)) is not None:
        raise pytest.UsageError(refusal)
    for item in items:
        reason = None
        measured = marks.is_measured(item)
        if xdist and measured:
            reason = xdist
        if reason is None:
            reason = marks.resolve_reference(item, settings, config.stash.get(_NO_KEPT_REFERENCE_KEY, None),
                                             config.stash.get(_NIGHTLY_AB_KEY, False))
        if reason is None:
            reason = marks.scale_skip_reason(item, settings.scale)
        gpu = item.get_closest_marker("gpu")
        if reason is None and gpu is not None:
            count = int(gpu.kwargs.get("count", gpu.args[0] if gpu.args else 1))
            reason = _cached_reason(config, ("gpu", count), lambda c=count: marks.gpu_skip_reason(c))
        if reason is None and item.get_closest_marker("gpu_tier") is not None:
            reason = _cached_reason(config, ("gpu_tier", None), marks.gpu_tier_skip_reason)
        if reason is None and item.get_closest_marker("sglang") is not None:
            reason = _cached_reason(config, ("sglang", None), marks.sglang_skip_reason)
        if reason is None and item.get_closest_marker("cgroup") is not None:
            quota, source = settings.cpu_quota, settings.sources["cpu_quota"]
            key = ("cgroup", quota.mode == "none")
            reason = _cached_reason(config, key, lambda q=quota, s=source: marks.cgroup_skip_reason(q, s))
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))


def pytest_collection_finish(session: pytest.Session) -> None:
    """A session that will measure opens its run history now, before its first test (``preflight``)."""
    preflight.before_measuring(session.config, session.items)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test of SGLang's own classes errors (never skips) where the installed release moved them."""
    if item.get_closest_marker("sglang") is not None:
        error = _cached_reason(item.config, ("sglang-layout", None), marks.sglang_layout_error)
        if error is not None:
            raise ConfigError(error)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_benchmark_generate_machine_info(config: pytest.Config) -> dict:
    """pytest-benchmark's own machine_info, once per process (``session.benchmarks.machine_info``)."""
    from engine_fixtures.session.benchmarks import machine_info

    return machine_info()


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_benchmark_scale_unit(config: pytest.Config, unit: str, benchmarks: list, best: dict, worst: dict,
                                sort: str) -> tuple[str, float] | None:
    """pytest-benchmark's table shows the suite's result entries unscaled, in their metric's unit."""
    from engine_fixtures.session.benchmarks import unscaled

    return unscaled(config, unit, benchmarks)


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_json(config: pytest.Config, benchmarks: object, output_json: dict) -> None:
    """Every pytest-benchmark JSON of a run names the suite's results it was exported from."""
    from engine_fixtures.session.benchmarks import describe
    from engine_fixtures.session.perf_session import SESSION_KEY

    session = config.stash.get(SESSION_KEY, None)
    if session is not None:
        describe(session, output_json)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, object, object]:
    report = yield
    if getattr(report, "failed", False):
        for title, text in sections.sections_for(item):
            report.sections.append((title, text))
    return report

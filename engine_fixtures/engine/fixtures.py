"""pytest fixtures of the engine concern: ``perf_model_dir``, ``engine_factory`` and ``engine``.

``engine`` is parametrised indirectly: ``@pytest.mark.parametrize("engine", [spec_or_overrides], indirect=True)``
where the parameter is an ``EngineSpec`` or a dict of ``EngineSpec`` fields (``model`` defaults to
``perf_model_dir``; ``gpus`` to ``--perf-gpus``). Engines are reused across tests by ``EngineSpec.key``
and stopped (leak-checked) at session end.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from engine_fixtures.engine.factory import EngineFactory
from engine_fixtures.engine.handle import EngineHandle
from engine_fixtures.engine.spec import EngineSpec
from engine_fixtures.errors import ConfigError
from engine_fixtures.model.modeldir import check_model_dir, write_model_dir
from engine_fixtures.options import SETTINGS_KEY


@pytest.fixture(scope="session")
def perf_model_dir(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``--perf-model`` if given (validated), else a generated dummy-weight dir of ``--perf-model-shape``."""
    settings = pytestconfig.stash[SETTINGS_KEY]
    if settings.model is not None:
        check_model_dir(Path(settings.model))
        return Path(settings.model)
    return write_model_dir(tmp_path_factory.mktemp("models") / f"qwen-{settings.model_shape}", settings.model_shape)


@pytest.fixture(scope="session")
def engine_factory(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineFactory]:
    """Starts or reuses engines keyed by spec; stops all of them at session end (leak-checked)."""
    settings = pytestconfig.stash[SETTINGS_KEY]
    from engine_fixtures.report.session import get_session

    session = get_session(pytestconfig)
    factory = EngineFactory(tmp_path_factory.mktemp("engines"), settings.engine_timeout,
                            on_finding=session.findings.append)
    try:
        yield factory
    finally:
        factory.close()


def spec_from_param(param: object, model: Path, gpus: tuple[int, ...]) -> EngineSpec:
    """Turn an indirect parameter (EngineSpec or a field mapping) into an EngineSpec."""
    if isinstance(param, EngineSpec):
        return param
    if isinstance(param, Mapping):
        fields = {"model": model, "gpus": gpus, **param}
        return EngineSpec(**fields)
    raise ConfigError(
        f"the engine fixture needs an EngineSpec or a dict of its fields as parameter, got {param!r}; use "
        "@pytest.mark.parametrize('engine', [EngineSpec(...)], indirect=True)"
    )


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
    return engine_factory.get(apply_quota_setting(spec, settings.cpu_quota, settings.sources["cpu_quota"]))


def apply_quota_setting(spec: EngineSpec, setting: float | str, source: str) -> EngineSpec:
    """``--perf-cpu-quota``: 'auto' keeps the arm's own quota, a number replaces it, 'none' skips quota arms
    (a quota arm is never run without its quota and reported as if it had one)."""
    if setting == "auto":
        return spec
    if setting == "none":
        if spec.cpu_quota is not None:
            pytest.skip(f"this arm measures under a {spec.cpu_quota:g}-core CPU quota, and quotas are disabled "
                        f"(--perf-cpu-quota none from {source}); drop that option to run it")
        return spec
    return spec.with_(cpu_quota=float(setting))

"""How the ``engine`` fixture's indirect parameter becomes the ``EngineSpec`` to start (``--perf-cpu-quota`` is then
applied by ``engine.spec.with_quota_setting``).

- ``spec_from_param(param, model, gpus)``: an ``EngineSpec`` as is, or a dict of its fields (``model`` and
  ``gpus`` filled in from ``perf_model_dir`` and ``--perf-gpus`` unless given); anything else is a
  ConfigError naming the parametrisation to use.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from engine_fixtures.engine.spec import EngineSpec
from engine_fixtures.errors import ConfigError


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

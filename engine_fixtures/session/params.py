"""How the ``engine`` fixture's indirect parameter and ``--perf-cpu-quota`` become the ``EngineSpec`` to start.

- ``spec_from_param(param, model, gpus)``: an ``EngineSpec`` as is, or a dict of its fields (``model`` and
  ``gpus`` filled in from ``perf_model_dir`` and ``--perf-gpus`` unless given); anything else is a
  ConfigError naming the parametrisation to use.
- ``apply_quota_setting(spec, setting, source)``: ``auto`` keeps the arm's quota, a number replaces it,
  ``none`` skips quota arms (never run without the quota they are reported under).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from engine_fixtures.engine.spec import EngineSpec
from engine_fixtures.errors import ConfigError
from engine_fixtures.quota import QuotaSetting


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


def apply_quota_setting(spec: EngineSpec, setting: QuotaSetting, source: str) -> EngineSpec:
    """``--perf-cpu-quota`` (``quota.QuotaSetting``) on an engine's spec; a quota arm that the setting disables
    skips (it is never run without its quota and reported as if it had one)."""
    reason = setting.skip_reason(spec.cpu_quota, source)
    if reason is not None:
        pytest.skip(reason)
    cores = setting.applied(spec.cpu_quota)
    return spec if cores == spec.cpu_quota else spec.with_(cpu_quota=cores)

"""SGLang serving performance regression suite: library and pytest plugin.

What a test author uses imports from here (loaded on first use, so the plugin stays light, and imported by
name only, so the package imports none of its modules and no module's ``from engine_fixtures import ...`` closes
a loop through it)::

    from engine_fixtures import EngineScenario, Group, Arm, Contrast, known_regression, SHM_COPY

The plugin (``engine_fixtures.plugin``) only wires hooks; everything else lives in one small module per concern
(see docs/ARCHITECTURE.md).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# name -> module that defines it
_EXPORTS = {
    "EngineScenario": "engine_fixtures.scenarios.engine",
    "Group": "engine_fixtures.scenarios.group",
    "Arm": "engine_fixtures.scenarios.group",
    "Contrast": "engine_fixtures.scenarios.group",
    "CounterBound": "engine_fixtures.scenarios.group",
    "FAMILIES": "engine_fixtures.scenarios.group",
    "REPORTED": "engine_fixtures.scenarios.group",
    "ROLE_FAMILY": "engine_fixtures.scenarios.group",
    "SHARE_FAMILY": "engine_fixtures.scenarios.group",
    "INHERIT": "engine_fixtures.scenarios.group",
    "QUOTA_THREADS": "engine_fixtures.scenarios.group",
    "SeedFigure": "engine_fixtures.scenarios.figures",
    "Point": "engine_fixtures.scenarios.figures",
    "Shape": "engine_fixtures.scenarios.figures",
    "CpuTierScenario": "engine_fixtures.scenarios.cpu_tier",
    "CpuTierArm": "engine_fixtures.cpu_tier.arms",
    "THREAD_ARMS": "engine_fixtures.cpu_tier.arms",
    "transport_arm": "engine_fixtures.cpu_tier.arms",
    "find_hidden_caps": "engine_fixtures.engine.lint",
    "WorkloadSpec": "engine_fixtures.loadgen.workload",
    "EngineSpec": "engine_fixtures.engine.spec",
    "EngineHandle": "engine_fixtures.engine.handle",
    "KnownRegression": "engine_fixtures.sglang_version",
    "SHM_COPY": "engine_fixtures.sglang_version",
    "IPC_CACHE_OFF": "engine_fixtures.sglang_version",
    "PP_MICROBATCH_CAP": "engine_fixtures.sglang_version",
    "installed_sglang": "engine_fixtures.sglang_version",
    "known_regression": "engine_fixtures.session.marks",
    "InvariantViolated": "engine_fixtures.errors",
    "MeasurementError": "engine_fixtures.errors",
    "ConfigError": "engine_fixtures.errors",
}
_RENAMED = {"installed_sglang": "installed"}
__all__ = [  # noqa: RUF022 (grouped as _EXPORTS)
    "EngineScenario", "Group", "Arm", "Contrast", "CounterBound", "FAMILIES", "REPORTED", "ROLE_FAMILY", "SHARE_FAMILY",
    "INHERIT", "QUOTA_THREADS", "SeedFigure", "Point", "Shape", "CpuTierScenario", "CpuTierArm", "THREAD_ARMS",
    "transport_arm", "find_hidden_caps", "WorkloadSpec", "EngineSpec",
    "EngineHandle", "KnownRegression", "SHM_COPY", "IPC_CACHE_OFF", "PP_MICROBATCH_CAP", "installed_sglang",
    "known_regression", "InvariantViolated", "MeasurementError", "ConfigError",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'engine_fixtures' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), _RENAMED.get(name, name))
    globals()[name] = value
    return value

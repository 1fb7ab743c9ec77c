"""``ScenarioResults``: this session's measured results by arm id, so cross-arm invariants do not depend on test
order or a module global, and each group's measurement (``group``/``put_group``: keyed by the declared ``Group``,
measured once, read by every test of the group). Stored in ``config.stash`` (``results_of(config)``)."""

from __future__ import annotations

from typing import Any

import pytest

from engine_fixtures.store.results import RunResult


class ScenarioResults:
    def __init__(self) -> None:
        self._by_id: dict[str, RunResult] = {}
        self._sets: dict[str, dict[str, RunResult]] = {}
        self._groups: dict[Any, Any] = {}

    def put(self, arm_id: str, result: RunResult) -> None:
        self._by_id[arm_id] = result

    def get(self, arm_id: str) -> RunResult:
        """The result of ``arm_id``; skips (with the fix) when that arm was not measured in this session."""
        if arm_id not in self._by_id:
            pytest.skip(f"arm {arm_id} was not measured in this session (skipped, failed or deselected); "
                        "select it too to judge this invariant")
        return self._by_id[arm_id]

    def cached_set(self, name: str) -> dict[str, RunResult] | None:
        return self._sets.get(name)

    def put_set(self, name: str, results: dict[str, RunResult]) -> None:
        self._sets[name] = results
        self._by_id.update(results)

    def group(self, group: Any) -> Any:
        """What ``put_group`` stored for a declared group (None before it was measured)."""
        return self._groups.get(group)

    def put_group(self, group: Any, measured: Any) -> None:
        self._groups[group] = measured


RESULTS_KEY = pytest.StashKey[ScenarioResults]()


def results_of(config: pytest.Config) -> ScenarioResults:
    return config.stash.setdefault(RESULTS_KEY, ScenarioResults())

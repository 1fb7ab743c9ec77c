"""Diagnostics attached to a failing test's report (Hypothesis/pytest-benchmark style), not printed.

A fixture registers a callable (the ``engine`` fixture: "engine log (tail)"; ``perf_record``: "perf
verdicts"); the plugin's ``pytest_runtest_makereport`` calls it only when the test failed, so a passing run
pays nothing and a failing one shows the evidence next to the failure.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

_SECTIONS_KEY = pytest.StashKey[list[tuple[str, Callable[[], str]]]]()


def add_on_failure(item: pytest.Item, title: str, render: Callable[[], str]) -> None:
    """Attach ``render()`` as section ``title`` to ``item``'s report if the test fails."""
    item.stash.setdefault(_SECTIONS_KEY, []).append((title, render))


def sections_for(item: pytest.Item) -> list[tuple[str, str]]:
    out = []
    for title, render in item.stash.get(_SECTIONS_KEY, []):
        try:
            text = render()
        except Exception as exc:  # a diagnostic must never hide the real failure
            text = f"<could not render {title}: {type(exc).__name__}: {exc}>"
        out.append((title, text))
    return out

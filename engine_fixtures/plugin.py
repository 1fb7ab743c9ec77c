"""pytest hooks of the suite. Hooks only: every behaviour lives in a library module."""

from __future__ import annotations

import pytest

from engine_fixtures import marks, options


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("perf", "SGLang serving performance suite")
    options.add_options(group.addoption)
    options.add_ini(parser)


def pytest_configure(config: pytest.Config) -> None:
    for signature, text in marks.MARKERS.items():
        config.addinivalue_line("markers", f"{signature}: {text}")
    config.stash[options.SETTINGS_KEY] = options.settings_from_config(config)

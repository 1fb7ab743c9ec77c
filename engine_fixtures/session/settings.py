"""The pytest side of the options (``options`` itself imports no pytest): ini keys, the session's ``Settings``
resolved once from the command line, the environment and the ini file, and the stash key that holds them."""

from __future__ import annotations

import pytest

from engine_fixtures.options import OPTIONS, Settings, settings_from_values

SETTINGS_KEY = pytest.StashKey[Settings]()


def add_ini(parser: pytest.Parser) -> None:
    for opt in OPTIONS:
        parser.addini(opt.ini, opt.help, default=None)


def settings_from_config(config: pytest.Config) -> Settings:
    cli = {o.name: config.getoption(o.cli.lstrip("-").replace("-", "_"), None) for o in OPTIONS}
    ini = {o.name: config.getini(o.ini) for o in OPTIONS}
    return settings_from_values(cli, ini, root=config.rootpath)

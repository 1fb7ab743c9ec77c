"""Root conftest: deliberately tiny.

The plugin itself is installed through the ``pytest11`` entry point of this package; here we only
load the Hypothesis profile named by ``HYPOTHESIS_PROFILE`` (``dev`` by default, ``ci`` in CI), at configure time:
``pytest-benchmark compare`` imports this file from the working directory and then parses pytest's configuration
(this repository's ``filterwarnings = error`` among it), where a package imported already, at this file's import,
was a warning made an error ("Module already imported so cannot be rewritten").
"""

import pytest


def pytest_configure(config: pytest.Config) -> None:
    from engine_fixtures import hypothesis_profiles

    hypothesis_profiles.load_from_env()

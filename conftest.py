"""Root conftest: deliberately tiny.

The plugin itself is installed through the ``pytest11`` entry point of this package; here we only
load the Hypothesis profile named by ``HYPOTHESIS_PROFILE`` (``dev`` by default, ``ci`` in CI).
"""

from engine_fixtures import hypothesis_profiles

hypothesis_profiles.load_from_env()

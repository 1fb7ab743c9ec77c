"""The lab: studies run by hand, or by ``scripts/gpu/gpu_tier.sh``, against results files or a GPU, and their
self-tests. Not product: the wheel ships ``engine_fixtures`` only (pyproject's ``[tool.setuptools.packages.find]``,
``perf_tests/selftests/house/test_wheel.py``), and no module of ``engine_fixtures`` imports ``tools``.

- ``tools.studies``: the studies, each ``python -m tools.studies.NAME`` from the repository root, and the two GPU
  studies run with pytest (``test_live_gate.py``, ``test_live_vs_separate.py``).
- ``tools.tests``: the studies' self-tests (no engine, no GPU), collected with the suite's (pyproject's
  ``testpaths``).
"""

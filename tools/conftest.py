"""The lab's tests get the self-tests' treatment: under pytest-xdist (the unit env's two workers) each test holds the
run's shared lock, so none runs beside a test of ``perf_tests/conftest.py``'s EXCLUSIVE list (the real-quota, sweep
and leak tests), and the fixtures of that conftest reach them. pytest applies a conftest's test hooks and fixtures
only to the tests under its directory, so this one takes them from ``perf_tests/conftest.py`` (the same module
object: pytest imports that file as ``perf_tests.conftest``). Its ``pytest_configure``, which opens the locks and
enters a private /dev/shm, is not taken: it runs once, when a run collects ``perf_tests`` too (the default
``testpaths``); a run of ``tools`` alone takes no lock, as a run with one process never does.

No module of the lab is in a group (``XDIST_GROUPS``): the studies' self-tests start no process and measure nothing.
A test here that starts stub engines or process trees belongs in a group; add its path there (paths under
``perf_tests/`` only today: extend ``_group_of`` to name ``tools/`` paths first)."""

from perf_tests.conftest import (  # noqa: F401 (hooks and fixtures, found by name)
    _isolate_inner_pytest_runs,
    no_steal_refusal,
    pytest_itemcollected,
    pytest_runtest_protocol,
    small_tmpfs,
)

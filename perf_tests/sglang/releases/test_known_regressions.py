"""The strict xfails of known upstream regressions, fed fake versions: a release inside the range must show the
regression (InvariantViolated), a release that fixed it turns the run red with the constant to move, and a
release outside the range is judged like any other. One inner pytest run holds every case (each run costs
seconds: the plugin reads the machine)."""

from __future__ import annotations

import pytest

from engine_fixtures import sglang_version

pytest_plugins = ("pytester",)

HEADER = """
import pytest
from engine_fixtures import sglang_version
from engine_fixtures.session import marks
from engine_fixtures.errors import InvariantViolated, MeasurementError

def outcome(kind):
    if kind == "violated":
        raise InvariantViolated("stock SGLang >= 0.95x buffer under quota: 0.81x")
    if kind == "broken":
        raise MeasurementError("zero completed requests")
"""
CASE = """
@marks.known_regression(sglang_version.{regression}, {version!r})
def test_{name}():
    outcome({kind!r})
"""
# name, regression, installed version, what the invariant does, the outcome pytest must report
CASES = (
    ("copy_0516_violated", "SHM_COPY", "0.5.16", "violated", "XFAIL"),
    ("copy_0520_violated", "SHM_COPY", "0.5.20", "violated", "XFAIL"),
    ("copy_0523_violated", "SHM_COPY", "0.5.23", "violated", "XFAIL"),
    ("copy_0520_fixed", "SHM_COPY", "0.5.20", "holds", "FAILED"),  # a fake 0.5.20 whose stock copy keeps up
    ("copy_0520_broken", "SHM_COPY", "0.5.20", "broken", "FAILED"),  # another failure is not the regression
    ("copy_0524_holds", "SHM_COPY", "0.5.24", "holds", "PASSED"),
    ("copy_0524_violated", "SHM_COPY", "0.5.24", "violated", "FAILED"),  # beyond the range: judged, not excused
    ("copy_0511_holds", "SHM_COPY", "0.5.11", "holds", "PASSED"),
    ("copy_none_holds", "SHM_COPY", None, "holds", "PASSED"),
    ("ipc_0516_violated", "IPC_CACHE_OFF", "0.5.16", "violated", "XFAIL"),
    ("ipc_0516_fixed", "IPC_CACHE_OFF", "0.5.16", "holds", "FAILED"),
    ("ipc_0517_holds", "IPC_CACHE_OFF", "0.5.17", "holds", "PASSED"),
    ("ipc_0520_violated", "IPC_CACHE_OFF", "0.5.20", "violated", "FAILED"),
    ("pp_0516_violated", "PP_MICROBATCH_CAP", "0.5.16", "violated", "XFAIL"),
    ("pp_0523_fixed", "PP_MICROBATCH_CAP", "0.5.23", "holds", "FAILED"),
    ("pp_0524_holds", "PP_MICROBATCH_CAP", "0.5.24", "holds", "PASSED"),
)


def test_each_case_ends_as_declared_and_a_fixed_release_is_told_what_to_change(pytester: pytest.Pytester) -> None:
    cases = "".join(CASE.format(name=n, regression=r, version=v, kind=k) for n, r, v, k, _ in CASES)
    pytester.makepyfile(test_regressions=HEADER + cases)
    # -vv: pytest prints the short summary's failure message whole only on CI or at verbosity >= 2 and trims it
    # to the terminal width otherwise, so without it this matched under CI=true and failed on a desk
    result = pytester.runpytest_subprocess("-rA", "-vv")
    for name, *_, expected in CASES:
        result.stdout.fnmatch_lines([f"{expected} test_regressions.py::test_{name}*"])
    result.stdout.fnmatch_lines([
        "*test_copy_0520_fixed*XPASS(strict)*known in SGLang 0.5.12..0.5.23 (installed: 0.5.20): regression 1: "
        "ShmPointerMMData.__init__ copies with torch*If this passes, SGLang 0.5.20 fixed it: set SHM_COPY.last "
        "below 0.5.20 in engine_fixtures/sglang_version.py*",
    ])
    result.stdout.fnmatch_lines(["*test_ipc_0516_fixed*XPASS(strict)*SGLang 0.5.16 fixed it: set "
                                 "IPC_CACHE_OFF.last below 0.5.16*"])


def test_ranges_match_the_dated_releases() -> None:
    v = sglang_version.parse
    assert [sglang_version.shm_copy_unfixed(v(x)) for x in ("0.5.11", "0.5.12", "0.5.16", "0.5.23", "0.6.0")] == [
        False, True, True, True, False]
    assert [sglang_version.ipc_cache_off_by_default(v(x)) for x in ("0.5.12", "0.5.16", "0.5.17", "0.5.23")] == [
        True, True, False, False]

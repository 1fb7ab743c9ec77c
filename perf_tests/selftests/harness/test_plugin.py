"""The plugin as a user meets it: option provenance, marker validation, skip reasons, the report header."""

from __future__ import annotations

import pytest

pytest_plugins = ("pytester",)


def test_bad_env_value_names_where_it_came_from(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    monkeypatch.setenv("PERF_REPEATS", "0")
    result = pytester.runpytest_inprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*Invalid --perf-repeats '0' from PERF_REPEATS environment variable: must be >= 1*"])


def test_command_line_beats_env_and_ini(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeini("[pytest]\nperf_repeats = 2\n")
    pytester.makepyfile(
        "def test_x(perf_settings):\n"
        "    assert perf_settings.repeats == 7\n"
        "    assert perf_settings.sources['repeats'] == 'command line --perf-repeats'\n"
    )
    monkeypatch.setenv("PERF_REPEATS", "3")
    pytester.runpytest_inprocess("--perf-repeats", "7").assert_outcomes(passed=1)


def test_env_beats_ini(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeini("[pytest]\nperf_repeats = 2\n")
    pytester.makepyfile("def test_x(perf_settings):\n    assert perf_settings.repeats == 3\n")
    monkeypatch.setenv("PERF_REPEATS", "3")
    pytester.runpytest_inprocess().assert_outcomes(passed=1)


def test_unknown_marker_keyword_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("import pytest\n\n@pytest.mark.perf(repeats=3)\ndef test_x():\n    pass\n")
    result = pytester.runpytest_inprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*perf mark can't have 'repeats' keyword argument (accepted: floor)*"])


def test_quota_tests_skip_with_the_reason_when_quotas_are_off(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("import pytest\n\n@pytest.mark.cgroup\ndef test_x():\n    raise AssertionError\n")
    result = pytester.runpytest_inprocess("--perf-cpu-quota", "none", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*CPU quotas are disabled (--perf-cpu-quota none from command line*"])


def test_header_states_the_machine_and_changed_options(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_inprocess("--perf-scale", "full")
    result.stdout.fnmatch_lines([
        "perf machine: *visible CPUs, effective CPU quota *",
        "perf machine key: cpu-*__quota-*__gpu-*",
        "perf options: scale=full (command line --perf-scale)",  # defaults (strict among them) are not listed
    ])

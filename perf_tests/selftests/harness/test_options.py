"""Options say what a user types: help, headers and errors spell values and flags as the command line does
(issue 28, case 9: ``expected true/false`` for a yes|no option, ``None`` for ``none``, ``--perf-history-url`` in
``perf-baseline``'s errors, Python reprs in help and headers)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from engine_fixtures import options
from engine_fixtures.cli import main
from engine_fixtures.errors import ConfigError
from engine_fixtures.inject import parse_injection
from engine_fixtures.option_values import parse_percent
from engine_fixtures.quota import QuotaSetting

pytest_plugins = ("pytester",)

REPRS = ("QuotaSetting(", "PosixPath(", "mappingproxy", "EngineBuild(", "Injection(", "None", "True", "False")


def test_values_are_shown_as_the_command_line_spells_them() -> None:
    show = options.display
    by = options.OPTIONS_BY_NAME
    assert show(QuotaSetting()) == "auto"
    assert show(QuotaSetting.parse("none")) == "none"
    assert show(QuotaSetting.parse("1.5")) == "1.5"
    assert show(Path("baselines")) == "baselines"
    assert show(parse_injection("slow:torch=6,copy:buffer=torch")) == "slow:torch=6,copy:buffer=torch"
    assert show(by["candidate"].default) == "installed"
    assert show(True) == "yes"
    assert show(None) == "unset"
    assert show((0, 1)) == "0,1"
    assert show(parse_percent("5"), by["floor"]) == "5%"
    assert show("postgresql://u:pw@h/db") == "postgresql://u:***@h/db"


@pytest.mark.parametrize("prefix", ["perf-", ""])
def test_help_prints_defaults_as_the_command_line_spells_them(prefix: str) -> None:
    parser = argparse.ArgumentParser()
    options.add_options(parser.add_argument, prefix=prefix)
    text = parser.format_help()
    assert not [r for r in REPRS if r in text], text
    assert "Default: auto; env PERF_CPU_QUOTA" in " ".join(text.split())
    assert ("ini perf_cpu_quota" in text) == bool(prefix)  # the CLI reads no ini file


def test_parse_errors_name_the_values_the_help_names() -> None:
    with pytest.raises(ConfigError, match=r"expected yes or no \(also true/false, on/off, 1/0\), got 'maybe'"):
        options.resolve("strict", cli="maybe")
    with pytest.raises(ConfigError, match=r"expected 'auto', 'none' or a number of cores > 0, got '-1'") as info:
        options.resolve("cpu_quota", cli="-1")
    assert "None" not in str(info.value)
    with pytest.raises(ConfigError, match=r"Invalid --perf-ab-arms ' , ' from command line --perf-ab-arms: expected "
                                          r"names separated by commas"):
        options.resolve("ab_arms", cli=" , ")
    assert options.resolve("ab_arms", cli="stock, buffer,stock").value == ("stock", "buffer")


def test_perf_baseline_errors_name_its_own_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "--history-url", "mysql://perf:pw@db/perf"]) == 2
    err = capsys.readouterr().err
    assert "Invalid --history-url (PERF_HISTORY_URL) 'mysql://perf:***@db/perf'" in err
    assert "--perf-" not in err
    assert main(["migrate", "--history", "--history-url", "none"]) == 2
    assert "--history-url is 'none'" in capsys.readouterr().err
    assert main(["runs", "--history-url", "none", "--results-dir", str(tmp_path)]) == 2
    assert "--perf-" not in capsys.readouterr().err


def test_help_shows_a_percent_sign_once_in_option_and_ini_help(pytester: pytest.Pytester) -> None:
    """Issue 37: the ini help printed ``5%%`` (the texts were escaped for argparse, which pytest's ini help is not)."""
    assert not [o.ini for o in options.OPTIONS if "%%" in o.help]
    parser = argparse.ArgumentParser()
    options.add_options(parser.add_argument)
    text = " ".join(parser.format_help().split())
    assert "e.g. 5 or 5%. The" in text
    assert "%%" not in text
    help_text = " ".join(pytester.runpytest_inprocess("--help").stdout.str().split())
    assert "%%" not in help_text
    assert help_text.count("e.g. 5 or 5%. The") == 2  # --perf-floor and the ini key perf_floor


@pytest.mark.parametrize("source", ["cli", "env"])
def test_a_budget_below_what_an_invariant_needs_is_refused_at_start(source: str) -> None:
    """Issue 37, case 4: --perf-max-repeats 2 was accepted, and every invariant and contrast was inconclusive after
    the whole run (``decide.MIN_BLOCKS`` rounds or blocks, 3)."""
    cli = {"max_repeats": "2", "repeats": "2"} if source == "cli" else {}
    env = {"PERF_MAX_REPEATS": "2", "PERF_REPEATS": "1"} if source == "env" else {}
    with pytest.raises(ConfigError, match=r"--perf-max-repeats 2 \((command line --perf-max-repeats|PERF_MAX_REPEATS "
                                          r"environment variable)\) is below 3, the fewest rounds \(blocks\) an "
                                          r"invariant or a contrast is judged from.*pass --perf-max-repeats 3 or more"):
        options.settings_from_values(cli, {}, env=env)
    assert options.settings_from_values({"max_repeats": "3", "repeats": "1"}, {}, env={}).max_repeats == 3


def test_every_budget_reaches_the_blocks_a_contrast_needs() -> None:
    from engine_fixtures.judge.decide import MIN_BLOCKS
    from engine_fixtures.judge.sequential import Budget
    from engine_fixtures.scenarios.results import live_budget

    for repeats in range(1, 6):
        settings = options.settings_from_values({"repeats": str(repeats), "max_repeats": "15"}, {}, env={})
        assert live_budget(settings.repeats, settings.max_repeats).maximum >= MIN_BLOCKS  # repeats 1 stopped at 2
        assert Budget.repeated(settings.repeats, settings.max_repeats).maximum >= MIN_BLOCKS


def test_a_cpu_tier_scenario_budget_is_its_own_unless_the_option_is_given() -> None:
    """The CPU tier's smoke declares the rounds its contrasts need while undecided (``max_rounds``); a
    ``--perf-max-repeats`` typed on the command line or in the environment still bounds the run."""
    from engine_fixtures.cpu_tier.arms import CpuTierArm
    from engine_fixtures.scenarios.cpu_tier import CpuTierScenario, rounds_budget

    arms = (CpuTierArm(copy="torch"), CpuTierArm(copy="buffer"))
    declared = CpuTierScenario("s", arms, max_rounds=25)
    default = options.settings_from_values({}, {}, env={})
    assert (rounds_budget(declared, default).initial, rounds_budget(declared, default).maximum) == (5, 25)
    assert rounds_budget(declared, default).looks == 5
    assert rounds_budget(CpuTierScenario("s", arms), default).maximum == 15
    given = options.settings_from_values({"max_repeats": "10"}, {}, env={})
    assert rounds_budget(declared, given).maximum == 10
    assert rounds_budget(declared, options.settings_from_values({}, {}, env={"PERF_MAX_REPEATS": "12"})).maximum == 12

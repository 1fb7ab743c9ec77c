"""Every ``--perf-*`` option, defined once and shared by the pytest plugin and the CLIs.

Precedence (pytest-timeout's): marker > command line > environment > ini > default. Every
resolved value remembers where it came from, and every parse error names that place, e.g.
``Invalid --perf-repeats '0' from PERF_REPEATS environment variable: must be >= 1``.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from engine_fixtures.engine.build import EngineBuild, parse_reference
from engine_fixtures.errors import ConfigError
from engine_fixtures.inject import Injection
from engine_fixtures.judge.decide import MIN_BLOCKS
from engine_fixtures.judge.sequential import DEFAULT_MAX_REPEATS, DEFAULT_REPEATS
from engine_fixtures.option_values import (
    Parser,
    parse_bool,
    parse_choice,
    parse_cpu_list,
    parse_cpus_setting,
    parse_injection_text,
    parse_names,
    parse_nonnegative_float,
    parse_percent,
    parse_positive_float,
    parse_positive_int,
)
from engine_fixtures.quota import QuotaSetting
from engine_fixtures.redact import mask_url, mask_value


@dataclass(frozen=True)
class Option:
    """One option: a CLI flag, an ini key and an environment variable with one help text."""

    name: str  # attribute name in Settings, e.g. "repeats"
    help: str
    parse: Parser
    default: Any
    metavar: str = "VALUE"
    flag: bool = False  # a store_true option (no value on the command line)
    show: Callable[[Any], str] | None = None  # the value as it is spelled on the command line, where not ``display``

    @property
    def cli(self) -> str:
        return "--perf-" + self.name.replace("_", "-")

    @property
    def ini(self) -> str:
        return "perf_" + self.name

    @property
    def env(self) -> str:
        return "PERF_" + self.name.upper()


OPTIONS: tuple[Option, ...] = (
    Option("cpu_quota", "CPU quota for the engine/producer cgroup: 'auto' uses each scenario's own quota, "
           "'none' runs without any quota (quota arms are then skipped, never run unquota'd), or a number of "
           "cores such as 13.6.", QuotaSetting.parse, QuotaSetting(), "auto|none|CORES"),
    Option("baseline_dir", "Directory holding baselines/<machine_key>/<scenario>.json.", Path, Path("baselines"),
           "DIR"),
    Option("results_dir", "Directory for this run's results JSON, Markdown summary and HTML report.", Path,
           Path(".perf-results"), "DIR"),
    Option("history_url", "Run-history database every run is appended to (after its results JSON): default an "
           "SQLite file <results-dir>/history.sqlite; postgresql://USER:PASSWORD@HOST:PORT/DB for a fleet of runners "
           "(docs/history/compose.yml); 'none' writes no history.", str, None, "URL", show=mask_url),
    Option("runner_labels", "Labels of the runner stored with each run in the history, comma-separated (e.g. "
           "'h200,rack-3'); GitHub's RUNNER_NAME is stored as the runner's name.", str, "", "A,B"),
    Option("update_baselines", "Write this run's results as the new baselines (same as 'perf-baseline update').",
           parse_bool, False, flag=True),
    Option("accept", "Record this run's results as baselines (--perf-update-baselines) although a verdict was "
           "regression or inconclusive; the reason is stored with the run.", str, None, "REASON"),
    Option("strict", "Fail a test whose verdict is inconclusive (undecided at the measurement budget) or an "
           "improvement (the baseline no longer describes the build). Default: yes when CI is set.",
           parse_bool, None, "yes|no"),
    Option("repeats", "Measured windows (rounds, blocks) per scenario before the first verdict; warmup is extra.",
           parse_positive_int, DEFAULT_REPEATS, "N"),
    Option("max_repeats", "Budget: while a verdict is inconclusive the runner measures more windows, up to this "
           "many (at least --perf-repeats, and at least 3: an invariant or a contrast needs 3 rounds or blocks).",
           parse_positive_int, DEFAULT_MAX_REPEATS, "N"),
    Option("floor", "Override every judged metric's declared floor (the smallest change ever flagged), e.g. 5 or "
           "5%. The tolerance itself comes from the noise measured in the pooled baseline.", parse_percent, None,
           "PCT", show=lambda v: f"{v * 100:g}%"),
    Option("reference", "Run the A/B of two builds against this reference build, measured interleaved on this "
           "runner: venv:DIR, python:PATH, site:DIR, wheel:FILE.whl, patch:NAME=MS (slow-decode, slow-scheduler, "
           "slow-tokenizer; see --perf-candidate), env:K=V (join with '+'). Only "
           "the tests marked ab run with it (the others judge one build and skip, saying so).", parse_reference,
           None, "BUILD"),
    Option("ab_instances", "A group of engines (an A/B against --perf-reference, the transport group): fresh "
           "instance groups to measure before the first look; the group is the unit of every verdict, so the offset "
           "between two starts of one build is inside the interval, with this host's A/A history and the run's own "
           "same-build pairs pooled into the variance.", parse_positive_int, 1, "N"),
    Option("ab_max_instances", "A group of engines: the most fresh instance groups while a verdict is undecided "
           "(default: twice --perf-ab-instances).", parse_positive_int, None, "N"),
    Option("ab_replicas", "A group of engines: engines of each build (launch) alive together in every instance "
           "group, served in the same mirrored blocks. Two or more give every run same-build pairs: null units "
           "pooled into its verdict and added to this host's A/A history, so the history grows with every A/B "
           "(engines alive together agree within 2-4 %, runs minutes apart differ by 9-13 %: H200 2026-12-04).",
           parse_positive_int, 2, "N"),
    Option("candidate", "The build judged in A/B mode (--perf-reference): 'installed' (default) or any "
           "--perf-reference form, e.g. patch:slow-decode=0.4 to prove the gate with a known slowdown (patches: "
           "slow-decode, MS ms of GPU time before every decode step, which the overlapped scheduler cannot hide; "
           "slow-scheduler, a CPU spin in every Scheduler.run_batch; slow-tokenizer, one in every request the "
           "tokenizer manager sends).",
           partial(parse_reference, option="--perf-candidate"), EngineBuild(), "BUILD"),
    Option("inject", "Deliberate slowdowns or faults that prove the gates red (never recorded as baselines): "
           "slow:ARM=MS (mechanism producer spins MS ms per request) and copy:ARM=IMPL (arm copies with IMPL).",
           parse_injection_text, None, "SPEC"),
    Option("window_s", "Length of one engine measurement window in seconds (the unit the GPU tier's verdicts "
           "count). Windows follow each other with no pause inside one load segment; a request counts in the window "
           "it finished in.", parse_positive_float, 3.0, "S"),
    Option("warmup_s", "Unmeasured load at the start of each engine load segment, in seconds (three times this on an "
           "engine instance's first segment); the warm-up then lasts until every request sent in it, and the first "
           "wave, has completed, so the first window starts after the last of them. A live arm's visit warms up for "
           "its first wave only (the engine is warm and drained at its switch).", parse_nonnegative_float, 1.0, "S"),
    Option("ab_blocks", "A group of engines: mirrored blocks (A B C D D C B A over its engines) measured on each "
           "fresh instance group.", parse_positive_int, 4, "N"),
    Option("ab_stage", "A group of engines: 'on' moves the engine being measured onto the stage (the engines' CPUs "
           "less two cores) and parks the idle members, whose schedulers busy-poll, on those two, so every engine is "
           "measured on the same CPUs beside the same neighbours; 'off' leaves every member on the engines' whole set. "
           "Its A/A history is its own. Off by default: on one H100 host it did not shrink the engines' offsets, "
           "which were small there with it off (docs/results/h100-issue52-2026-12-07). Needs pinned engines "
           "(--perf-engine-cpus) with 6 or more cores.", parse_choice("off", "on"), "off", "off|on"),
    Option("ab_arms", "The A/B of builds: serve only these of a test's arms (names separated by commas, e.g. 'buffer' "
           "for the buffer copy alone, a shorter run for a pull request's budget); an arm not named is left out and "
           "the findings say so. Default: every arm the test declares.", parse_names, None, "NAMES"),
    Option("engine_cpus", "CPUs for the engines, disjoint from the load client's: 'auto' pins on machines with 8 or "
           "more visible CPUs (the client gets the last quarter, at least 2, unless --perf-client-cpus names them), "
           "'off' pins nothing, or a list such as 0-11.", parse_cpus_setting, "auto", "auto|off|LIST"),
    Option("role_cpus", "Per-role pinning in the engines' CPUs: 'on' gives the scheduler and the HTTP server two "
           "physical cores each, the detokenizer one (no core shared by two roles), the rest the others; its pools are "
           "its own (role_cpus=on in the arm's key).", parse_choice("off", "on"), "off", "off|on"),
    Option("scale", "Size of the CPU-tier sweep: 'smoke' (CI, minutes) or 'full' (every arm).",
           parse_choice("smoke", "full"), "smoke", "smoke|full"),
    Option("model", "Model directory for GPU-tier engine tests (default: generate a dummy-weight one).", Path,
           None, "DIR"),
    Option("model_shape", "Dummy model to generate when --perf-model is not given: the seed's Qwen3-VL-4B shape by "
           "default (dummy weights, nothing downloaded); 'tiny' for smoke runs (its engine-to-engine noise is 3-5x "
           "the 4B shape's).", parse_choice("tiny", "qwen2.5-vl-3b", "qwen3-vl-4b"), "qwen3-vl-4b", "NAME"),
    Option("gpus", "GPU indices the engine may use, e.g. '0' or '0,1'.", parse_cpu_list, (0,), "LIST"),
    Option("engine_timeout", "Seconds an engine may take to become ready.", parse_positive_float, 900.0, "S"),
    Option("sample_hz", "Sampling rate of the CPU and GPU samplers.", parse_positive_float, 10.0, "HZ"),
    Option("client_cpus", "Pin the load client to these CPUs (it always runs outside the engine's cgroup).",
           parse_cpu_list, None, "LIST"),
    Option("require_sglang", "This run tests this SGLang release (e.g. 0.5.20): the session stops at start unless "
           "it is installed and its own classes import, so tests marked 'sglang' can never skip unseen (the "
           "per-version tox envs set it).", str, None, "VERSION"),
    Option("cgroup_parent", "Create every cgroup sandbox under this cgroup directory (v2 or v1). Without it a v2 "
           "sandbox goes inside this process's own cgroup and never above it; pass e.g. /sys/fs/cgroup when that "
           "cgroup offers no cpu controller and you accept sandboxes outside it (they escape its memory limit and "
           "its kill).", Path, None, "PATH"),
    Option("state_dir", "Machine-wide directory of the perf lock and the records of running perf runs (what the "
           "sweep at session start knows of killed runs). Default: /run/lock/sglang-perf-suite, else "
           "$TMPDIR/sglang-perf-suite.", Path, None, "DIR"),
    Option("lock_timeout", "Seconds a run that measures waits for the machine lock held by another measuring run "
           "(two perf runs on one machine corrupt each other's numbers) before it fails.", parse_positive_float,
           1800.0, "S"),
    Option("ab_detect", "A group of engines: the widest change a pass may promise to catch, e.g. 10 or 10%, on "
           "every log-scale metric (default twice each metric's declared live-contrast size: 20% for throughput, "
           "TTFT and TPOT); a run that cannot promise it is inconclusive.", parse_percent, None, "PCT",
           show=lambda v: f"{v * 100:g}%"),
    Option("require_gpu", "This run tests the GPU tier on N GPUs: the session stops at start unless NVML sees N GPUs "
           "and SGLang is installed, so GPU tests can never skip unseen (perf-gpu and the GPU workflow set it).",
           parse_positive_int, None, "N"),
    Option("allow_missing_baselines", "Strict mode: let a measuring session in which no row is a verdict (every arm "
           "without a pool on this host, no contrast or invariant selected) end green; without it such a session "
           "fails, since it judged nothing.", parse_bool, False, flag=True),
    Option("max_steal", "Refuse a measured window whose host the hypervisor stole more than this share of the CPU "
           "time from (the window keeps only its telemetry and counts toward no verdict), e.g. 5 or 5%.",
           parse_percent, 0.05, "PCT", show=lambda v: f"{v * 100:g}%"),
    Option("promote", "After a green run that judged the installed build (no A/B, nothing injected), keep that build "
           "as this runner's reference build (`perf-baseline reference promote`), the one the next "
           "--perf-reference stored(-if-kept) A/B judges against. Off by default: the nightly workflow's input.",
           parse_bool, False, flag=True),
    Option("profile", "Differential CPU profiles of the engine's roles (the CPU tier: its producer) with py-spy, taken "
           "in dedicated windows after the verdicts are decided: 'on-regression' when a verdict fails the test, "
           "'always', or 'off'. Default: on-regression in strict mode, off otherwise. Without ptrace permission or "
           "py-spy a line says so and the run carries on.", parse_choice("on-regression", "always", "off"), None,
           "on-regression|always|off"),
    Option("profile_rate", "py-spy's sampling rate for --perf-profile (samples per second per process); the "
           "overhead at the default was measured (docs/results/profile-overhead.md).", parse_positive_float, 100.0,
           "HZ"),
)
OPTIONS_BY_NAME: Mapping[str, Option] = {o.name: o for o in OPTIONS}


def add_options(addoption: Callable[..., Any], prefix: str = "perf-", names: tuple[str, ...] | None = None) -> None:
    """Add options to a pytest group (prefix ``perf-``) or an argparse parser (prefix ``''``: a CLI, which reads
    no ini file)."""
    for opt in OPTIONS:
        if names is not None and opt.name not in names:
            continue
        flag = "--" + prefix + opt.name.replace("_", "-")
        default = "" if "Default:" in opt.help else f" Default: {display(opt.default, opt)};"  # help says it
        ini = f"; ini {opt.ini}" if prefix else ""
        # argparse formats help with %: the texts hold a plain "%" (pytest's ini help prints them as they are)
        text = f"{opt.help}{default} {'env' if default else 'Env'} {opt.env}{ini}.".replace("%", "%%")
        if opt.flag:
            addoption(flag, action="store_true", default=None, help=text)
        else:
            addoption(flag, metavar=opt.metavar, default=None, help=text)


@dataclass(frozen=True)
class Resolved:
    value: Any
    source: str  # "default", "ini perf_x", "PERF_X environment variable", "--perf-x", "marker m(x=...)"


def display(value: Any, opt: Option | None = None) -> str:
    """An option's value as it is spelled on the command line, for help, headers and messages (``yes``/``no``, a
    path, ``auto``, a build's label, ``slow:torch=6``, ``0,1``; a URL's password masked); None is ``unset``."""
    if opt is not None and opt.show is not None and value is not None:
        return opt.show(value)
    if value is None or value == "":
        return "unset"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, EngineBuild):
        return value.label
    if isinstance(value, Injection):
        return value.describe()
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, tuple):
        return ",".join(display(v) for v in value)
    return mask_value(str(value))  # str, Path, QuotaSetting (its str is its spelling), int


def spelled_for_cli(text: str, names: Iterable[str]) -> str:
    """``text`` (a message naming ``--perf-*`` options) as a CLI says it: its own options ``names`` are spelled
    without the ``perf-`` prefix (``--perf-history-url`` -> ``--history-url``), the way ``add_options`` adds them."""
    for name in names:
        opt = OPTIONS_BY_NAME[name]
        text = re.sub(rf"{re.escape(opt.cli)}(?![\w-])", "--" + name.replace("_", "-"), text)
    return text


def _parse(opt: Option, raw: Any, where: str) -> Any:
    if not isinstance(raw, str):
        return raw
    try:
        return opt.parse(raw)
    except (argparse.ArgumentTypeError, ValueError, TypeError, ConfigError) as exc:
        raise ConfigError(f"Invalid {opt.cli} {raw!r} from {where}: {exc}") from None


def resolve(
    name: str,
    *,
    cli: Any = None,
    env: Mapping[str, str] | None = None,
    ini: Any = None,
    marker: tuple[str, Any] | None = None,
) -> Resolved:
    """Resolve one option by precedence marker > CLI > env > ini > default."""
    opt = OPTIONS_BY_NAME[name]
    env = os.environ if env is None else env
    if marker is not None:
        where, raw = marker
        return Resolved(_parse(opt, raw, where), where)
    if cli is not None:
        return Resolved(_parse(opt, cli, f"command line {opt.cli}"), f"command line {opt.cli}")
    if env.get(opt.env, "") != "":
        where = f"{opt.env} environment variable"
        return Resolved(_parse(opt, env[opt.env], where), where)
    if ini not in (None, "", []):
        where = f"ini key {opt.ini}"
        return Resolved(_parse(opt, ini if not isinstance(ini, list) else ",".join(ini), where), where)
    return Resolved(opt.default, "default")


@dataclass(frozen=True)
class Settings:
    """The session's resolved options. Frozen: pass it around, never mutate it."""

    cpu_quota: QuotaSetting = QuotaSetting()  # noqa: RUF009 (frozen: one shared instance is safe)
    baseline_dir: Path = Path("baselines")
    results_dir: Path = Path(".perf-results")
    history_url: str | None = None
    runner_labels: str = ""
    update_baselines: bool = False
    accept: str | None = None
    strict: bool | None = None
    repeats: int = DEFAULT_REPEATS
    max_repeats: int = DEFAULT_MAX_REPEATS
    floor: float | None = None
    reference: EngineBuild | None = None  # parsed at start-up: a typo stops the run before any engine starts
    candidate: EngineBuild = EngineBuild()  # noqa: RUF009 (frozen: one shared instance is safe)
    ab_instances: int = 1
    ab_max_instances: int | None = None
    ab_replicas: int = 2
    inject: Injection | None = None
    window_s: float = 3.0
    warmup_s: float = 1.0
    ab_blocks: int = 4
    ab_stage: str = "off"
    ab_arms: tuple[str, ...] | None = None
    engine_cpus: tuple[int, ...] | str = "auto"
    role_cpus: str = "off"
    scale: str = "smoke"
    model: Path | None = None
    model_shape: str = "qwen3-vl-4b"
    gpus: tuple[int, ...] = (0,)
    engine_timeout: float = 900.0
    sample_hz: float = 10.0
    client_cpus: tuple[int, ...] | None = None
    require_sglang: str | None = None
    cgroup_parent: Path | None = None
    state_dir: Path | None = None
    lock_timeout: float = 1800.0
    ab_detect: float | None = None
    require_gpu: int | None = None
    allow_missing_baselines: bool = False
    max_steal: float = 0.05
    promote: bool = False
    profile: str | None = None
    profile_rate: float = 100.0
    sources: Mapping[str, str] = field(default_factory=dict)


def settings_from_values(cli: Mapping[str, Any], ini: Mapping[str, Any], env: Mapping[str, str] | None = None,
                         root: Path | None = None) -> Settings:
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for opt in OPTIONS:
        r = resolve(opt.name, cli=cli.get(opt.name), env=env, ini=ini.get(opt.name))
        value = r.value
        if isinstance(value, Path) and root is not None and not value.is_absolute():
            value = root / value
        values[opt.name] = value
        sources[opt.name] = r.source
    if values["strict"] is None:  # strict where a machine reads the outcome: CI
        ci = (os.environ if env is None else env).get("CI", "")
        values["strict"] = ci.strip().lower() not in ("", "0", "false", "no")
        sources["strict"] = "default (CI is set)" if values["strict"] else "default (CI is not set)"
    if values["max_repeats"] < MIN_BLOCKS:  # every invariant and contrast would end inconclusive after a full run
        raise ConfigError(f"--perf-max-repeats {values['max_repeats']} ({sources['max_repeats']}) is below "
                          f"{MIN_BLOCKS}, the fewest rounds (blocks) an invariant or a contrast is judged from: every "
                          f"one would be inconclusive after the whole run; pass --perf-max-repeats {MIN_BLOCKS} or "
                          f"more (default {DEFAULT_MAX_REPEATS})")
    if values["max_repeats"] < values["repeats"]:
        raise ConfigError(f"--perf-max-repeats {values['max_repeats']} ({sources['max_repeats']}) is below "
                          f"--perf-repeats {values['repeats']} ({sources['repeats']}); the budget must allow the "
                          "first look")
    return Settings(**values, sources=sources)

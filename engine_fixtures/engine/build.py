"""``EngineBuild``: which SGLang an engine runs, so a candidate can be measured against a reference build.

``--perf-reference`` names the reference (``parse_reference``); parts joined by ``+`` combine:

- ``venv:DIR``           another virtual environment (its ``bin/python``)
- ``python:PATH``        another interpreter
- ``site:DIR``           the same interpreter with ``DIR`` first on ``PYTHONPATH`` (an unpacked SGLang)
- ``wheel:FILE.whl``     the same interpreter with that wheel unpacked first on ``PYTHONPATH``
- ``patch:NAME=MS,...``  the same install plus named patches of the suite's SGLang plugin (known slowdowns)
- ``env:K=V,...``        the same install plus environment variables (e.g. an SGLang feature switch)
- ``installed``          the suite's own interpreter and SGLang, unchanged (the default candidate)
- ``stored``             this runner's stored reference build (``store.reference_build``: the last good build kept
                         beside the pools), resolved when the session starts (``session.preflight``)
- ``stored-if-kept``     the same where this runner keeps one; where it keeps none, the A/B's tests skip, saying how
                         to promote one (the nightly's A/B: ``tox -e perf-gpu``)

Example: ``--perf-reference venv:/opt/sglang-0.5.15`` or ``--perf-candidate patch:slow-decode=0.4`` (the named patches
are ``sglang_plugin.patches.TARGETS``).
The build is part of ``EngineSpec`` (and so of the engine's key); the default is the suite's own interpreter.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from engine_fixtures.errors import ConfigError
from engine_fixtures.sglang_plugin.patches import PATCH_ENV, parse

KINDS = ("venv", "python", "site", "wheel", "patch", "env")
STORED = "stored"  # this runner's kept reference build (store.reference_build), resolved when a session starts
STORED_IF_KEPT = "stored-if-kept"  # the kept build where this runner keeps one; else the A/B skips, naming the fix
VERSION_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class EngineBuild:
    """Interpreter, extra import paths (first on PYTHONPATH), a wheel to unpack, and extra environment."""

    label: str = "installed"
    python: str | None = None
    pythonpath: tuple[str, ...] = ()
    wheel: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    stored: bool = False  # ``stored``: a placeholder until the session resolves it to the kept build

    @property
    def is_default(self) -> bool:
        return self.python is None and not self.pythonpath and self.wheel is None and not self.env and not self.stored

    def interpreter(self, default: str = sys.executable) -> str:
        return self.python or default

    def import_paths(self, workdir: Path) -> list[str]:
        """PYTHONPATH entries this build puts first; a wheel is unpacked once under ``workdir``."""
        if self.stored:
            raise ConfigError("--perf-reference stored was never resolved to the kept build; it is resolved when a "
                              "pytest session starts (session.preflight.resolve_builds)")
        paths = list(self.pythonpath)
        if self.wheel is not None:
            target = workdir / "build-site"
            if not (target / ".unpacked").exists():
                with zipfile.ZipFile(self.wheel) as whl:
                    whl.extractall(target)
                (target / ".unpacked").write_text(self.wheel)
            paths.insert(0, str(target))
        return paths

    def environ(self) -> dict[str, str]:
        return dict(self.env)

    def sglang_version(self, workdir: Path, default_python: str = sys.executable) -> str | None:
        """The SGLang version this build imports (asked of its interpreter; no SGLang import here)."""
        if self.is_default:
            return None  # the caller uses the suite's own installed version
        code = "import importlib.metadata as m\ntry: print(m.version('sglang'))\nexcept m.PackageNotFoundError: pass"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([*self.import_paths(workdir), env.get("PYTHONPATH", "")]).strip(os.pathsep)
        try:
            out = subprocess.run([self.interpreter(default_python), "-c", code], capture_output=True, text=True,
                                 timeout=VERSION_TIMEOUT_S, env=env, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ConfigError(f"reference build {self.label!r}: cannot ask {self.interpreter(default_python)} for "
                              f"its SGLang version ({exc}); check the path given to --perf-reference") from None
        return out.stdout.strip() or None


def _pairs(kind: str, text: str) -> tuple[tuple[str, str], ...]:
    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, eq, value = part.partition("=")
        if not eq or not key:
            raise ConfigError(f"--perf-reference {kind}:{text!r}: expected NAME=VALUE[,NAME=VALUE]")
        out.append((key, value))
    return tuple(out)


def parse_reference(text: str, option: str = "--perf-reference") -> EngineBuild:
    """Parse ``--perf-reference`` (see the module docstring); ConfigError names what is wrong and the forms.
    ``installed`` is the suite's own interpreter and SGLang, unchanged."""
    if text.strip() == "installed":
        return EngineBuild()
    if text.strip() in (STORED, STORED_IF_KEPT):
        return EngineBuild(label=text.strip(), stored=True)
    forms = "venv:DIR, python:PATH, site:DIR, wheel:FILE.whl, patch:NAME=MS, env:K=V (join with '+')"
    python: str | None = None
    paths: list[str] = []
    wheel: str | None = None
    env: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split("+"))):
        kind, colon, value = part.partition(":")
        if not colon or kind not in KINDS or not value:
            raise ConfigError(f"{option} {part!r}: expected one of {forms}")
        if kind in ("venv", "python"):
            if python is not None:
                raise ConfigError(f"{option} {text!r} names two interpreters; give one venv: or python:")
            exe = Path(value) / "bin" / "python" if kind == "venv" else Path(value)
            if not os.access(exe, os.X_OK):
                raise ConfigError(f"{option} {part!r}: {exe} is not an executable Python; "
                                  f"{'create the venv and install SGLang in it' if kind == 'venv' else 'fix the path'}")
            python = str(exe)
        elif kind == "site":
            if not Path(value).is_dir():
                raise ConfigError(f"{option} {part!r}: {value} is not a directory")
            paths.append(str(Path(value).resolve()))
        elif kind == "wheel":
            if not (value.endswith(".whl") and Path(value).is_file()):
                raise ConfigError(f"{option} {part!r}: {value} is not a .whl file")
            wheel = str(Path(value).resolve())
        elif kind == "patch":
            try:
                parse(value)
            except ValueError as exc:
                raise ConfigError(f"{option} {part!r}: {exc}") from None
            env[PATCH_ENV] = ",".join(filter(None, [env.get(PATCH_ENV, ""), value]))
        else:
            env.update(_pairs(kind, value))
    if python is None and not paths and wheel is None and not env:
        raise ConfigError(f"{option} {text!r} names nothing; expected one of {forms}")
    return EngineBuild(label=text, python=python, pythonpath=tuple(paths), wheel=wheel,
                       env=tuple(sorted(env.items())))


def with_patch(build: EngineBuild, patches: Mapping[str, float], label: str | None = None) -> EngineBuild:
    """``build`` plus named patches (used to make a candidate with a known slowdown)."""
    text = ",".join(f"{k}={v:g}" for k, v in patches.items())
    env = dict(build.env)
    env[PATCH_ENV] = ",".join(filter(None, [env.get(PATCH_ENV, ""), text]))
    return EngineBuild(label or f"{build.label}+patch:{text}", build.python, build.pythonpath, build.wheel,
                       tuple(sorted(env.items())))

"""``--perf-reference`` parsing: every form, combinations, and errors that name the fix."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import pytest

from engine_fixtures.engine.build import EngineBuild, parse_reference, with_patch
from engine_fixtures.errors import ConfigError


def test_default_build_is_the_suites_interpreter() -> None:
    b = EngineBuild()
    assert b.is_default
    assert b.interpreter() == sys.executable
    assert b.sglang_version(Path(".")) is None


def test_patch_and_env_forms_combine(tmp_path: Path) -> None:
    b = parse_reference("patch:slow-scheduler=0.3+env:SGLANG_X=1,SGLANG_Y=2")
    assert dict(b.env) == {"PERF_ARMS_PATCH": "slow-scheduler=0.3", "SGLANG_X": "1", "SGLANG_Y": "2"}
    assert b.python is None
    assert b.label == "patch:slow-scheduler=0.3+env:SGLANG_X=1,SGLANG_Y=2"


def test_venv_python_site_and_wheel(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    site = tmp_path / "site"
    site.mkdir()
    whl = tmp_path / "sglang-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr("sglang-9.9.9.dist-info/METADATA", "Metadata-Version: 2.1\nName: sglang\nVersion: 9.9.9\n")
        z.writestr("sglang/__init__.py", "")
    b = parse_reference(f"venv:{venv}+site:{site}+wheel:{whl}")
    assert b.python == str(venv / "bin" / "python")
    paths = b.import_paths(tmp_path / "work")
    assert paths[0] == str(tmp_path / "work" / "build-site")
    assert paths[1] == str(site.resolve())
    assert b.sglang_version(tmp_path / "work") == "9.9.9"  # asked of that interpreter with that path


@pytest.mark.parametrize(("text", "match"), [
    ("", "names nothing"),
    ("git:abc", "expected one of venv:DIR"),
    ("venv:/nonexistent/venv", "not an executable Python"),
    ("site:/nonexistent/dir", "not a directory"),
    ("wheel:/nonexistent/x.whl", "not a .whl file"),
    ("patch:slow-gpu=1", "known patches are"),
    ("env:NOEQUALS", "NAME=VALUE"),
    (f"python:{sys.executable}+python:{sys.executable}", "two interpreters"),
])
def test_bad_references_name_the_fix(text: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_reference(text)


def test_with_patch_adds_to_existing_patches() -> None:
    b = with_patch(parse_reference("patch:slow-tokenizer=1"), {"slow-scheduler": 0.25})
    assert dict(b.env)["PERF_ARMS_PATCH"] == "slow-tokenizer=1,slow-scheduler=0.25"

"""Only the product in the wheel: the packages pyproject's ``[tool.setuptools.packages.find]`` ships hold no test
code (issue 35). No ``testing``/``tests`` package, none of the stand-ins (``stub_*``, ``faults``, ``holder_run``...,
now ``perf_tests.support``) or the command-line studies (now the lab's, ``tools.studies``), and no shipped module
imports ``perf_tests`` or ``tools``, which the wheel does not contain (also inside functions)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from setuptools import find_namespace_packages, find_packages

ROOT = Path(__file__).resolve().parents[3]
INCLUDE = ("engine_fixtures*",)  # pyproject's include, for when it cannot be read
TEST_PACKAGES = frozenset({"testing", "tests", "selftests", "support"})
# tools/studies modules; components is left out: a product module may take that name
STUDIES = frozenset({"ab_study", "window_study", "rate_study", "block_sd", "ab_rejudge", "ab_trials", "host_drift",
                     "pool_promise", "live_vs_separate", "seed_figures", "bench_vs_sglang"})
# perf_tests/support modules besides stub_*; lockstep and postgres are left out: product modules may take those names
STAND_INS = frozenset({"faults", "holder_run", "proc_tree", "work_tree"})
NOT_SHIPPED = ("perf_tests", "tools")  # the self-tests and their stand-ins; the lab


def find_config() -> dict[str, Any] | None:
    """pyproject's ``[tool.setuptools.packages.find]``, or None without a TOML reader (Python < 3.11, no tomli)."""
    try:
        import tomllib
    except ModuleNotFoundError:
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ModuleNotFoundError:
            return None
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]


def shipped(root: Path, config: dict[str, Any]) -> dict[str, list[Path]]:
    """package -> its modules, as setuptools finds them (``namespaces`` defaults to true in pyproject.toml)."""
    find = find_namespace_packages if config.get("namespaces", True) else find_packages
    where = root / config.get("where", ["."])[0]
    names = find(where=str(where), include=config["include"], exclude=config.get("exclude", ()))
    return {name: sorted((where / name.replace(".", "/")).glob("*.py"))
            for name in sorted(names) if "__pycache__" not in name.split(".")}


def imports_test_code(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found += [(node.lineno, n) for n in names if n.split(".")[0] in NOT_SHIPPED]
    return found


def problems(root: Path, config: dict[str, Any]) -> list[str]:
    packages = shipped(root, config)
    assert packages, f"nothing shipped from {root} with {config}: the check would pass vacuously"
    found = []
    for package, modules in packages.items():
        if TEST_PACKAGES & set(package.split(".")):
            found.append(f"package {package}: test code, not product (perf_tests/support is its place)")
        for path in modules:
            name, where = path.stem, path.relative_to(root)
            if name in STUDIES:
                found.append(f"{where}: a study, not product (tools/studies is its place)")
            elif name.startswith("stub") or name.startswith("test_") or name in STAND_INS:
                found.append(f"{where}: a self-test stand-in or test, not product (perf_tests/support is its place)")
            found += [f"{where}:{line} imports {mod}, which the wheel does not ship"
                      for line, mod in imports_test_code(path)]
    return found


def test_pyproject_ships_the_engine_fixtures_packages_only() -> None:
    config = find_config()
    if config is None:
        pytest.skip("no TOML reader (tomllib is Python 3.11+, tomli is not installed): pyproject.toml's "
                    "[tool.setuptools.packages.find] cannot be read here; the content check uses INCLUDE instead")
    assert tuple(config["include"]) == INCLUDE, "update INCLUDE with pyproject's include"
    assert all(p == "engine_fixtures" or p.startswith("engine_fixtures.") for p in shipped(ROOT, config))


def test_the_wheel_ships_no_test_code() -> None:
    assert problems(ROOT, find_config() or {"include": list(INCLUDE)}) == []


def test_the_check_finds_test_code_in_the_old_layout(tmp_path: Path) -> None:
    """The check can fail: the layout before issue 35 (``engine_fixtures/testing``, the studies in ``scenarios/``),
    and a product module importing the stand-ins or the lab, are each reported."""
    pkg = tmp_path / "engine_fixtures"
    for rel, text in {"__init__.py": "", "testing/__init__.py": "", "testing/holder_run.py": "",
                      "scenarios/__init__.py": "", "scenarios/rate_study.py": "", "scenarios/live.py": "",
                      "engine/__init__.py": "", "engine/stub_engine.py": "",
                      "engine/handle.py": "def f():\n    from perf_tests.support import stub_copy\n"
                                          "    from tools.studies import ab_rejudge\n"}.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    (tmp_path / "perf_tests").mkdir()
    (tmp_path / "perf_tests" / "__init__.py").write_text("")
    found = problems(tmp_path, {"include": list(INCLUDE)})
    assert found == [
        "engine_fixtures/engine/handle.py:2 imports perf_tests.support, which the wheel does not ship",
        "engine_fixtures/engine/handle.py:3 imports tools.studies, which the wheel does not ship",
        "engine_fixtures/engine/stub_engine.py: a self-test stand-in or test, not product (perf_tests/support is "
        "its place)",
        "engine_fixtures/scenarios/rate_study.py: a study, not product (tools/studies is its place)",
        "package engine_fixtures.testing: test code, not product (perf_tests/support is its place)",
        "engine_fixtures/testing/holder_run.py: a self-test stand-in or test, not product (perf_tests/support is "
        "its place)",
    ]

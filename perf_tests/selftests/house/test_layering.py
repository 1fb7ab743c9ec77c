"""The layering rules of docs/ARCHITECTURE.md, checked against the code's own imports (every ``import``, also
inside functions and under ``TYPE_CHECKING``): each unit imports only units on lower layers; only the entry points
and ``session/`` import pytest; no module of the package imports ``perf_tests`` (the self-tests and their stand-ins
in ``perf_tests.support``) or ``tools`` (the lab's studies), which the wheel does not ship (test_wheel.py); no
module imports itself through others (``from engine_fixtures import x`` counts as importing the package too)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[3] / "engine_fixtures"

# Top to bottom, as in docs/ARCHITECTURE.md ("Layers"). A unit is a subpackage or a top-level module.
LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    ("entry points", frozenset({"plugin", "fixtures", "cli"})),
    ("pytest session; history and reference-build commands", frozenset({"session", "cli_history", "cli_reference"})),
    ("scenario runs", frozenset({"scenarios"})),
    ("profiles; rendering", frozenset({"profile", "report"})),
    ("CPU tier; settings; load client", frozenset({"cpu_tier", "options", "loadgen"})),
    ("samplers; files and history", frozenset({"sampling", "store"})),
    ("the engine; machine facts", frozenset({"engine", "machine"})),
    ("processes and cgroups; SGLang plugin", frozenset({"isolation", "sglang_plugin"})),
    ("values and statistics", frozenset({"quota", "judge", "model", "transport", "nvml", "option_values"})),
    ("foundations", frozenset({"errors", "redact", "inject", "sglang_version", "hypothesis_profiles"})),
)
PYTEST_ALLOWED = frozenset({"plugin", "fixtures", "session"})
LAYER_OF = {unit: depth for depth, (_, units) in enumerate(reversed(LAYERS)) for unit in units}


def unit_of(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0].removesuffix(".py")


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, imported module) for every import statement in the file."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "engine_fixtures":
                out += [(node.lineno, f"engine_fixtures.{a.name}") for a in node.names]
            else:
                out.append((node.lineno, node.module))
    return out


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p != PACKAGE / "__init__.py")  # the lazy export table


def violations() -> list[str]:
    found = []
    for path in modules():
        unit = unit_of(path)
        where = path.relative_to(PACKAGE.parent)
        for line, name in imports(path):
            if name == "pytest" or name.startswith(("pytest.", "_pytest")):
                if unit not in PYTEST_ALLOWED:
                    found.append(f"{where}:{line} imports pytest; only {sorted(PYTEST_ALLOWED)} may")
                continue
            if name == "perf_tests" or name.startswith("perf_tests."):
                found.append(f"{where}:{line} imports {name}: perf_tests (perf_tests.support too) is the self-tests' "
                             "and is not shipped; product code never imports it")
                continue
            if name == "tools" or name.startswith("tools."):
                found.append(f"{where}:{line} imports {name}: tools is the lab (studies run by hand) and is not "
                             "shipped; product code never imports it")
                continue
            if not name.startswith("engine_fixtures."):
                continue
            target = name.split(".")[1]
            if target == unit:
                continue
            if LAYER_OF[target] >= LAYER_OF[unit]:
                found.append(f"{where}:{line} imports {name}: {unit!r} ({LAYERS[-1 - LAYER_OF[unit]][0]}) may only "
                             f"import lower layers, and {target!r} is on {LAYERS[-1 - LAYER_OF[target]][0]!r}")
    return found


def module_graph(package: Path) -> dict[str, set[str]]:
    """module -> the package's modules it imports (a package's ``__init__`` is the package itself)."""
    def name(path: Path) -> str:
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    files = {name(p): p for p in package.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, path in files.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            else:
                continue
            for target in targets:
                while target and target not in files:
                    target = target.rpartition(".")[0]
                if target and target != mod:
                    graph[mod].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found, state, path = [], {}, []

    def visit(mod: str) -> None:
        state[mod] = "open"
        path.append(mod)
        for dep in sorted(graph[mod]):
            if state.get(dep) == "open":
                found.append([*path[path.index(dep):], dep])
            elif dep not in state:
                visit(dep)
        path.pop()
        state[mod] = "done"

    for mod in sorted(graph):
        if mod not in state:
            visit(mod)
    return found


def test_no_import_cycles() -> None:
    assert [" -> ".join(c) for c in cycles(module_graph(PACKAGE))] == []


def test_the_cycle_check_counts_the_package_and_local_imports(tmp_path: Path) -> None:
    fake = tmp_path / "engine_fixtures"
    fake.mkdir()
    (fake / "__init__.py").write_text("from typing import TYPE_CHECKING\n"
                                      "if TYPE_CHECKING:\n    from engine_fixtures.a import x\n")
    (fake / "a.py").write_text("def f():\n    from engine_fixtures import b\n")
    (fake / "b.py").write_text("x = 1\n")
    assert cycles(module_graph(fake)) == [["engine_fixtures", "engine_fixtures.a", "engine_fixtures"]]


def test_every_unit_has_a_layer() -> None:
    units = {unit_of(p) for p in modules()}
    assert units == set(LAYER_OF), (f"not in LAYERS: {sorted(units - set(LAYER_OF))}; "
                                    f"in LAYERS but gone: {sorted(set(LAYER_OF) - units)}")


def test_imports_follow_the_layers() -> None:
    assert violations() == []


def test_the_check_finds_an_upward_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check can fail: a judge module that imports the session and pytest is reported twice."""
    fake = tmp_path / "engine_fixtures"
    (fake / "judge").mkdir(parents=True)
    (fake / "session").mkdir()
    (fake / "judge" / "bad.py").write_text("import pytest\nfrom engine_fixtures.session import marks\n")
    (fake / "session" / "ok.py").write_text("import pytest\nfrom engine_fixtures.judge import bad\n")
    monkeypatch.setitem(globals(), "PACKAGE", fake)
    found = violations()
    assert len(found) == 2
    assert "judge/bad.py:1 imports pytest" in found[0]
    assert "may only import lower" in found[1]


def test_the_check_finds_product_code_importing_the_self_tests(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check can fail: an engine module that imports the stub engine, by either form, is reported twice, and one
    that imports a study of the lab once."""
    fake = tmp_path / "engine_fixtures"
    (fake / "engine").mkdir(parents=True)
    (fake / "engine" / "bad.py").write_text("def f():\n    from perf_tests.support import stub_engine\n"
                                            "import perf_tests.support.stub_copy\n"
                                            "from tools.studies import ab_rejudge\n")
    monkeypatch.setitem(globals(), "PACKAGE", fake)
    found = sorted(violations())
    assert len(found) == 3
    assert "engine/bad.py:2 imports perf_tests.support: perf_tests" in found[0]
    assert "engine/bad.py:3 imports perf_tests.support.stub_copy" in found[1]
    assert "engine/bad.py:4 imports tools.studies: tools is the lab" in found[2]

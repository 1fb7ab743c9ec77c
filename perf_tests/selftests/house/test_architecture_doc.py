"""docs/ARCHITECTURE.md names the modules that are there, checked against the tree as it is (and README, GUIDE and
CONTRIBUTING name only modules that exist: the third rule below, over their code spans too).

- Every name in the first column of "Packages and their contracts" exists under ``engine_fixtures/`` (``x/``: a
  subpackage with an ``__init__.py``; ``x.py``: a module).
- Every top-level unit of ``engine_fixtures`` (each subpackage, each top-level module but ``__init__.py``) is named in
  that column.
- Every module the document names anywhere, in code (a backticked span or the fenced data path), as
  ``pkg/module.py``, ``pkg/module``, ``pkg/`` or ``pkg.module[.attribute...]`` (with or without a leading
  ``engine_fixtures``), exists. Only names whose first part is a subpackage of ``engine_fixtures`` (or that start
  with ``engine_fixtures``) are module references: scenario ids such as ``engine/transport=cpu/...`` and names
  such as ``trend.trend`` (a module named without its package) are not checked. After the module, dotted parts
  are attributes; a dotted part that is neither a module nor a subpackage must be a name the package's
  ``__init__.py`` holds. Names of files that are not Python (``report.html``, ``summary.md``) are not modules.
- In a package's row of the table, a backticked ``x.py`` or ``x.attribute`` (``x`` in lower case, not itself a
  subpackage) names the row's module ``x`` (``blocks.py`` in the ``judge/`` row, ``group.start_group`` in the
  ``engine/`` row), and that module exists (but for the few first parts in ``FOREIGN``: ``sglang.srt.plugins``,
  the cgroup file ``cpu.stat``).

A failure names the missing module and the line of the document.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "ARCHITECTURE.md"
PACKAGE = ROOT / "engine_fixtures"
TABLE_HEADING = "## Packages and their contracts"
OTHER_DOCS = (ROOT / "README.md", ROOT / "docs" / "GUIDE.md", ROOT / "docs" / "CONTRIBUTING.md")  # their code spans

SPAN = re.compile(r"`([^`\n]+)`")
TOKEN = re.compile(r"[^\s`(),:;|'\"]+")
IDENT = r"[A-Za-z_]\w*"
DOTTED = re.compile(rf"^{IDENT}(?:\.{IDENT})+$")  # pkg.module[.attr...]
SLASHED = re.compile(rf"^{IDENT}(?:/{IDENT})*(?:\.py|/)?$")  # pkg/, pkg/module, pkg/module.py, module.py
RELATIVE = re.compile(r"^[a-z_][a-z0-9_]*(?:\.py|\.\w+(?:\.\w+)*)$")  # module.py, module.attr in a package's row
# first parts of dotted names in a package's row that are not its modules: other packages, cgroup interface files
FOREIGN = ("engine_fixtures", "sglang", "torch", "cpu", "memory", "cgroup")
NOT_PYTHON = (".html", ".md", ".json", ".png", ".sqlite", ".txt", ".toml", ".ini", ".yaml", ".yml", ".csv", ".svg")


def doc_lines(doc: Path = DOC) -> list[tuple[int, str]]:
    return list(enumerate(doc.read_text().splitlines(), start=1))


def is_package(path: Path) -> bool:
    return (path / "__init__.py").is_file()


def top_level_units() -> set[str]:
    """``x/`` for each subpackage of engine_fixtures, ``x.py`` for each top-level module but ``__init__.py``."""
    packages = {f"{p.name}/" for p in PACKAGE.iterdir() if is_package(p)}
    modules = {p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py"}
    return packages | modules


def table_rows() -> list[tuple[int, list[str], str]]:
    """(line, the backticked names of the first column, the rest of the row) for each row of the contracts table."""
    out, inside = [], False
    for line, text in doc_lines():
        if text.startswith("## "):
            inside = text.strip() == TABLE_HEADING
            continue
        cells = text.split("|")
        if not inside or not text.startswith("|") or len(cells) < 3 or set(cells[1].strip()) <= {"-"}:
            continue
        if cells[1].strip() == "module":  # the header row
            continue
        names = SPAN.findall(cells[1])
        assert names, f"{DOC.name}:{line}: the first column names no module in backticks: {cells[1].strip()!r}"
        out.append((line, names, "|".join(cells[2:])))
    return out


def table_names() -> list[tuple[int, str]]:
    """(line, name) for each backticked name in the first column of the contracts table."""
    return [(line, name) for line, names, _ in table_rows() for name in names]


def unit_problem(name: str) -> str | None:
    """Why the table's ``name`` (``x/`` or ``x.py``) is not a top-level unit of engine_fixtures, or None."""
    if name.endswith("/"):
        return None if is_package(PACKAGE / name.rstrip("/")) else f"there is no subpackage engine_fixtures/{name}"
    if name.endswith(".py"):
        return None if (PACKAGE / name).is_file() else f"there is no module engine_fixtures/{name}"
    return f"{name!r} is neither a subpackage (`x/`) nor a module (`x.py`)"


def code_tokens(doc: Path = DOC) -> list[tuple[int, str]]:
    """(line, token) for each word in a backticked span or in a fenced block."""
    out, fenced = [], False
    for line, text in doc_lines(doc):
        if text.startswith("```"):
            fenced = not fenced
            continue
        spans = [text] if fenced else SPAN.findall(text)
        out += [(line, token.rstrip(".")) for span in spans for token in TOKEN.findall(span)]
    return out


def _defines(package: Path, name: str) -> bool:
    """The package's ``__init__.py`` binds ``name`` at its top level (a def, a class, an assignment, an import)."""
    tree = ast.parse((package / "__init__.py").read_text())
    bound: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return name in bound


def reference_problem(token: str) -> str | None:
    """Why the module ``token`` names does not exist (None: it does, or ``token`` names no module of ours)."""
    if token.endswith(NOT_PYTHON):
        return None
    explicit = token.startswith(("engine_fixtures.", "engine_fixtures/"))
    name = token[len("engine_fixtures."):] if explicit else token
    if DOTTED.match(name) and not name.endswith(".py"):
        parts = name.split(".")
    elif SLASHED.match(name) and ("/" in name or explicit):
        parts = name.removesuffix("/").removesuffix(".py").split("/")
        if name.endswith(".py"):
            parts[-1] += ".py"
        elif name.endswith("/"):
            parts[-1] += "/"
    else:
        return None
    if not explicit and not is_package(PACKAGE / parts[0].removesuffix("/")):
        return None  # not a module reference (a scenario id, a module named without its package, a word)
    where = PACKAGE
    for i, part in enumerate(parts):
        shown = "engine_fixtures/" + "/".join(p.removesuffix("/") for p in parts[:i + 1])
        if part.endswith(".py"):
            return None if (where / part).is_file() else f"there is no module {shown}"
        if part.endswith("/"):
            return None if is_package(where / part[:-1]) else f"there is no subpackage {shown}/"
        if is_package(where / part):
            where = where / part
        elif (where / f"{part}.py").is_file():
            return None  # a module; the dotted parts after it are its attributes
        elif "/" in name or where == PACKAGE:
            return f"there is no module {shown}.py nor subpackage {shown}/"
        elif not _defines(where, part):
            return (f"there is no module {shown}.py nor subpackage {shown}/, and {where.name}/__init__.py holds no "
                    f"name {part!r}")
        else:
            return None  # an attribute of the package
    return None


def relative_references() -> list[tuple[int, str, str]]:
    """(line, token, the module reference it is) for each ``x.py`` / ``x.attr`` in the row of a package ``pkg/``:
    ``pkg/x.py`` / ``pkg.x.attr`` (a name that is a reference of its own, ``testing.faults``, is left to it)."""
    out = []
    for line, names, rest in table_rows():
        if len(names) != 1 or not names[0].endswith("/"):
            continue
        package = names[0].removesuffix("/")
        for span in SPAN.findall(rest):
            for token in (t.rstrip(".") for t in TOKEN.findall(span)):
                if not RELATIVE.match(token) or token.endswith(NOT_PYTHON):
                    continue
                first = token.split(".")[0]
                if is_package(PACKAGE / first) or first in FOREIGN:
                    continue  # pkg.module: checked as it is; or not one of ours
                out.append((line, token, f"{package}/{token}" if token.endswith(".py") else f"{package}.{token}"))
    return out


def test_the_contracts_table_names_only_units_that_exist() -> None:
    problems = [f"{DOC.name}:{line}: `{name}`: {why}" for line, name in table_names()
                if (why := unit_problem(name)) is not None]
    assert not problems, "\n".join(problems)


def test_every_top_level_unit_has_a_row_in_the_contracts_table() -> None:
    named = {name for _, name in table_names()}
    missing = sorted(top_level_units() - named)
    assert not missing, (f"{DOC.name} ({TABLE_HEADING!r}) names no row for "
                         + ", ".join(f"engine_fixtures/{m}" for m in missing)
                         + "; give each unit its concern and key API there")


@pytest.mark.parametrize("doc", [DOC, *OTHER_DOCS], ids=lambda p: p.name)
def test_every_module_the_document_names_exists(doc: Path) -> None:
    problems = [f"{doc.name}:{line}: `{token}`: {why}" for line, token in code_tokens(doc)
                if (why := reference_problem(token)) is not None]
    assert not problems, "\n".join(problems)


def test_every_module_a_package_row_names_exists() -> None:
    problems = [f"{DOC.name}:{line}: `{token}` (read as `{ref}`): {why}" for line, token, ref in relative_references()
                if (why := reference_problem(ref)) is not None]
    assert not problems, "\n".join(problems)


def test_the_module_references_are_read_as_meant() -> None:
    """The reader itself: what counts as a reference, attributes after a module, the words it leaves alone."""
    assert reference_problem("judge/blocks.py") is None
    assert reference_problem("scenarios.group.REPORTED_WHY") is None
    assert reference_problem("engine_fixtures.judge.simulate") is None
    assert reference_problem("engine_fixtures/plugin.py") is None
    assert reference_problem("engine/running") is None
    assert reference_problem("store/") is None
    for word in ("engine/transport=cpu/...", "trend.trend", "blocks.py", "perf_tests/sglang/cpu_tier/", "store",
                 "report.html"):
        assert reference_problem(word) is None, word
    assert "judge/nothing.py" in (reference_problem("judge/nothing.py") or "")
    assert "judge/nothing" in (reference_problem("judge.nothing.attr") or "")
    assert "engine/nothing" in (reference_problem("engine/nothing") or "")
    assert "engine_fixtures/nothing.py" in (reference_problem("engine_fixtures/nothing.py") or "")
    assert "store/nothing/" in (reference_problem("store/nothing/") or "")
    rows = {(token, ref) for _, token, ref in relative_references()}
    assert {("blocks.py", "judge/blocks.py"), ("group.start_group", "engine.group.start_group")} <= rows
    assert not {token for token, _ in rows} & {"testing.faults", "Baseline.noise", "trend.html"}

"""Every module of the package depends one way: no two modules import each other, however
indirectly, and however late (an import inside a function counts as much as one at the top,
since either way each module needs the other to be whole)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared"


def module_names(root: Path) -> dict[str, Path]:
    """``reminders.cli.common`` -> its file, for every module and package under ``root``."""
    found: dict[str, Path] = {}
    for path in sorted((root / "reminders").rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imported(module: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that ``module`` imports anywhere in its body, except under
    ``if TYPE_CHECKING:`` (never run)."""
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _type_checking_only(node):
            skipped.update(id(inner) for child in node.body for inner in ast.walk(child))
    targets: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:  # `from reminders import db` imports the module db
                child = f"{source}.{alias.name}"
                targets.add(child if child in known else source)
    return {t for t in targets if t in known and t != module}


def import_graph(root: Path) -> dict[str, set[str]]:
    modules = module_names(root)
    known = set(modules)
    return {name: imported(name, path, known) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_the_package_has_no_import_cycle() -> None:
    found = cycles(import_graph(SHARED))
    assert found == [], "modules that import each other: " + "; ".join(
        " <-> ".join(group) for group in found)


def test_the_walk_sees_imports_inside_functions_and_relative_ones(tmp_path: Path) -> None:
    package = tmp_path / "reminders"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from reminders import b\n")
    (package / "b.py").write_text("from .sub import c\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "c.py").write_text("def g():\n    from ..a import f\n")
    (package / "d.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                  "    from reminders import e\n")
    (package / "e.py").write_text("import reminders.d\n")
    graph = import_graph(tmp_path)
    assert graph["reminders.a"] == {"reminders.b"}
    assert graph["reminders.b"] == {"reminders.sub.c"}
    assert graph["reminders.sub.c"] == {"reminders.a"}
    assert graph["reminders.d"] == set()
    assert cycles(graph) == [["reminders.a", "reminders.b", "reminders.sub.c"]]


@pytest.mark.parametrize("name", ["reminders.cli", "reminders.cli.common"])
def test_the_command_line_is_walked(name: str) -> None:
    assert name in import_graph(SHARED)

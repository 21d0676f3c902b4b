"""The code's shape: every module imports on its own, the import graph of gpufleet/ and infra/ has no cycle, and
functions stay short enough to read (an allow-list names the few exceptions and why)."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGES = ("gpufleet", "infra")
MAX_FUNCTION_LINES = 80
# Functions allowed above MAX_FUNCTION_LINES, each with the reason (at most 3).
LONG_FUNCTIONS = {}


def modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module under PACKAGES."""
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imported(name: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """The project modules ``name`` imports anywhere in its file (a function's local import counts: it runs too; one
    under ``if TYPE_CHECKING:`` counts as well: the types are a dependency, and a cycle through them is one the next
    change turns into an import error), plus the packages whose ``__init__`` such an import runs first (those not
    already ancestors of ``name``)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([base] if base else [])])
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if not target or target == name:
                continue
            yield target
            parts = target.split(".")
            for i in range(1, len(parts)):
                ancestor = ".".join(parts[:i])
                if ancestor in known and not name.startswith(ancestor + "."):
                    yield ancestor


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {name: set(imported(name, path, known)) - {name} for name, path in known.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph, as the modules along it, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def test_the_import_graph_has_no_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_check_sees_local_and_package_imports():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    edges = import_graph()
    # cli/__init__ imports its command modules; spec.rules imports gpufleet.azure.aks, which imports the models: the
    # package gpufleet.spec (whose __init__ loads the rules) must be an edge too
    assert "gpufleet.cli.stack" in edges["gpufleet.cli"]
    assert {"gpufleet.spec.models"} <= edges["gpufleet.spec.rules"]
    assert "gpufleet.spec" in edges["gpufleet.plan.build"]
    # baseline's checks take the plan's types, imported under TYPE_CHECKING only: still an edge
    assert "gpufleet.plan.model" in edges["gpufleet.azure.baseline"]


# The layout's rule (docs/architecture.md, Layout): the data types sit below the code that fills them, and a
# package's __init__ imports nothing, so importing a type never loads the code that computes it.
DATA_TYPES = ("gpufleet.spec.types", "gpufleet.spec.models", "gpufleet.plan.model")
BELOW_THE_DOMAINS = ("gpufleet.common.", "gpufleet.catalog")
QUIET_PACKAGES = (
    "gpufleet.common",
    "gpufleet.spec",
    "gpufleet.plan",
    "gpufleet.host",
    "gpufleet.kube",
    "gpufleet.azure",
    "gpufleet.baremetal",
    "gpufleet.fleet",
)


@pytest.mark.parametrize("name", DATA_TYPES)
def test_the_data_types_import_no_domain(name: str):
    allowed = {"gpufleet.spec", *DATA_TYPES[: DATA_TYPES.index(name)]}
    above = sorted(t for t in import_graph()[name] if t not in allowed and not t.startswith(BELOW_THE_DOMAINS))
    assert not above, f"{name} imports {above}: move the type it needs down beside it (docs/architecture.md)"


@pytest.mark.parametrize("package", QUIET_PACKAGES)
def test_a_package_init_imports_nothing(package: str):
    assert import_graph()[package] == set()


@pytest.mark.parametrize("name", sorted(m for m in modules() if not m.endswith(".__main__")))  # those run a program
def test_each_module_imports_on_its_own(name: str):
    proc = subprocess.run(
        [sys.executable, "-c", f"import {name}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def long_functions() -> dict[str, int]:
    """``file::Class.function`` -> lines, for functions over MAX_FUNCTION_LINES (decorators and docstrings count)."""
    found = {}
    for path in modules().values():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                    child.parent_name = node.name if isinstance(node, ast.ClassDef) else None  # type: ignore[attr-defined]
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if lines > MAX_FUNCTION_LINES:
                    owner = getattr(node, "parent_name", None)
                    found[f"{path.relative_to(REPO)}::{owner + '.' if owner else ''}{node.name}"] = lines
    return found


def test_functions_over_80_lines_are_the_allowed_few():
    assert len(LONG_FUNCTIONS) <= 3
    too_long = long_functions()
    unexpected = {f: n for f, n in too_long.items() if f not in LONG_FUNCTIONS}
    assert not unexpected, (
        f"functions over {MAX_FUNCTION_LINES} lines (split them, or allow one with a reason): {unexpected}"
    )
    stale = sorted(set(LONG_FUNCTIONS) - set(too_long))
    assert not stale, f"allowed but no longer long (remove from LONG_FUNCTIONS): {stale}"

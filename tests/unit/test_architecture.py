"""The layers hold: roles import only the core and themselves, nothing imports upward, no cycles.

Imports are read from the source (also those inside functions), so a lazy import cannot hide a
dependency or a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("contracts", "agent", "appliance", "client", "server", "testbed", "analysis", "benchmarks")
# what each package may import besides itself
ALLOWED = {
    "contracts": set(),
    "appliance": {"contracts"},
    "client": {"contracts"},
    "server": {"contracts"},
    "agent": {"contracts", "appliance", "client", "server"},
    "analysis": {"contracts"},
    "testbed": {"contracts", "analysis", "benchmarks"},
    "benchmarks": {"contracts", "testbed", "analysis", "client", "server"},  # measures role code in-process
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in sorted((REPO / pkg).rglob("*.py"))}


def imports_of(path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules `path` imports, resolved to modules (a `from pkg import name` that names a
    module counts as that module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        else:
            continue
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name:
                found.add(name)
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {m: imports_of(p, modules) - {m} for m, p in modules.items()}


def test_packages_import_only_what_their_layer_allows(graph):
    bad = []
    for module, deps in graph.items():
        package = module.split(".")[0]
        for dep in deps:
            other = dep.split(".")[0]
            if other != package and other not in ALLOWED[package]:
                bad.append(f"{module} imports {dep}")
    assert bad == []


def test_no_import_cycles(graph):
    cycles = []
    state: dict[str, int] = {}  # 1 visiting, 2 done
    stack: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        stack.append(module)
        for dep in sorted(graph.get(module, ())):
            # a package's __init__ is imported with every module in it: not an edge back
            if module.startswith(dep + "."):
                continue
            if state.get(dep) == 1:
                cycles.append(stack[stack.index(dep) :] + [dep])
            elif dep not in state:
                visit(dep)
        stack.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)
    assert cycles == []


def test_the_checker_sees_imports_inside_functions(tmp_path):
    """The checker itself: a lazy import is an import."""
    src = tmp_path / "m.py"
    src.write_text("def f():\n    from testbed.cli import main\n")
    assert imports_of(src, {"testbed.cli": src, "testbed": src}) == {"testbed.cli"}

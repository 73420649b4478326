"""Small modules and short functions: no module of the project's code over 500 lines and no function
over 80 (tests and protoc's generated code aside), so that each stays readable in one sitting."""

from __future__ import annotations

import ast

from tests.helpers import REPO

PACKAGES = (
    "contracts",
    "agent",
    "appliance",
    "client",
    "server",
    "analysis",
    "testbed",
    "benchmarks",
    "scripts",
)
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80


def project_files():
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            if not path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
                yield path


def long_functions(source: str, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int]]:
    """(name, lines) of every function or method longer than `limit` lines, decorators aside."""
    return [
        (node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno >= limit
    ]


def test_no_module_is_over_500_lines():
    long = {
        str(p.relative_to(REPO)): n for p in project_files() if (n := len(p.read_text().splitlines())) > 500
    }
    assert long == {}


def test_no_function_is_over_80_lines():
    found = {str(p.relative_to(REPO)): f for p in project_files() if (f := long_functions(p.read_text()))}
    assert found == {}


def test_the_measure_counts_a_function_from_its_def_to_its_last_line():
    body = "".join(f"    x{i} = {i}\n" for i in range(79))
    assert long_functions(f"def short():\n{body}") == []  # 80 lines
    assert long_functions(f"def long():\n{body}    return x0\n") == [("long", 81)]

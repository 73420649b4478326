"""The layers point one way: checked on the import graph read from the source, not by eye.

- `contracts/` imports nothing of the project;
- the roles (`appliance/`, `client/`, `server/`) import only `contracts/` and themselves;
- `agent/` imports `contracts/` and the roles; `analysis/` imports `contracts/`;
- `testbed/` imports `contracts/` and `analysis/`: it reaches the roles only through the agent, as a
  process on the host;
- `benchmarks/` sits on top (it measures everything, in process) and nothing imports it, but for the
  one edge of `DISPATCH`: `testbed bench` handing its parsed arguments to the benchmarks.

Every import counts: `import a.b`, `from a import b`, relative imports (`from . import x`, `from ..pkg
import y`), imports inside functions, and `importlib.import_module("a.b")` with a literal name. A module
is checked on everything it reaches (transitively), so `testbed.x -> contracts.y -> client.z` is
reported against `testbed.x` as well, and the packages must not import each other in a cycle. The
checker takes a root directory, and the tests at the end prove it on small synthetic trees.
"""

from __future__ import annotations

import ast
from collections import deque
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ROLES = {"appliance", "client", "server"}
PACKAGES = ("contracts", "appliance", "client", "server", "agent", "analysis", "testbed", "benchmarks")
# what each package may reach besides itself
ALLOWED: dict[str, set[str]] = {
    "contracts": set(),
    **{role: {"contracts"} for role in ROLES},
    "agent": {"contracts"} | ROLES,
    "analysis": {"contracts"},
    "testbed": {"contracts", "analysis"},
    "benchmarks": set(PACKAGES),
}
# The only edge allowed against the layers, and not followed beyond: the CLI entry of `testbed bench`
# dispatches (lazily, when that command runs) to the benchmarks, which sit on top of everything.
DISPATCH = {("testbed.cli.bench", "benchmarks.runner")}
# The rooms of `testbed/`, each reaching only the rooms below it: the foundation (its top-level modules:
# inventory, experiment, devices, run files, estimate, lock), the backends (a lab and its hosts), the link
# (validation, traces, shaping checks and repairs), the sweep, decisions online, and the CLI on top.
ROOMS = ("testbed.backends", "testbed.link", "testbed.sweep", "testbed.online", "testbed.cli")
BELOW = {"contracts", "analysis"}  # what every room may reach (the package's own layer rule)
ROOM_ALLOWED: dict[str, set[str]] = {
    "testbed": BELOW,
    "testbed.backends": BELOW | {"testbed"},
    "testbed.link": BELOW | {"testbed", "testbed.backends"},
    "testbed.sweep": BELOW | {"testbed", "testbed.backends", "testbed.link"},
    "testbed.online": BELOW | {"testbed", "testbed.backends", "testbed.link", "testbed.sweep"},
    "testbed.cli": BELOW | {"testbed", *ROOMS} | {"benchmarks"},  # benchmarks: the dispatch edge alone
}
ENTRY = {"testbed.__main__": "testbed.cli"}  # `python -m testbed` is the CLI's entry

Graph = dict[str, set[str]]


# ------------------------------------------------------------------ the checker
def project_modules(root: Path, packages=PACKAGES) -> dict[str, Path]:
    """Module name -> file, for every .py file of the packages under `root`."""
    modules = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _ancestors(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _imported_names(tree: ast.AST, module: str, is_package: bool) -> list[tuple[str, list[str]]]:
    """(module named, names taken from it) for every import in the tree, relative ones resolved."""
    found: list[tuple[str, list[str]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                if node.level - 1 > len(package) - 1:
                    raise ValueError(f"{module}: relative import beyond its top-level package")
                package = package[: len(package) - (node.level - 1)]
                base = ".".join(package + ([node.module] if node.module else []))
            found.append((base, [alias.name for alias in node.names]))
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            literal = getattr(node.args[0], "value", None)
            if name in ("import_module", "__import__") and isinstance(literal, str) and literal[:1] != ".":
                found.append((literal, []))
    return found


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules that importing `module` imports itself (its parent packages included:
    Python runs a package's `__init__` before any module in it)."""

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for base, names in _imported_names(ast.parse(path.read_text()), module, is_package):
        targets = [resolve(base)] + [f"{base}.{n}" for n in names if f"{base}.{n}" in modules]
        for target in filter(None, targets):
            found |= {target, *(a for a in _ancestors(target) if a in modules)}
    found |= {a for a in _ancestors(module) if a in modules}
    return found - {module}


def import_graph(root: Path, packages=PACKAGES) -> Graph:
    modules = project_modules(root, packages)
    return {m: imports_of(m, p, modules) for m, p in modules.items()}


def package_of(module: str) -> str:
    return module.split(".")[0]


def room_of(module: str) -> str:
    """A module's room of `testbed/` (its top-level modules are the room "testbed"); elsewhere its package."""
    if module in ENTRY:
        return ENTRY[module]
    return next((r for r in ROOMS if module == r or module.startswith(r + ".")), package_of(module))


def dispatch_edges(dispatch) -> set[tuple[str, str]]:
    """The edges a dispatch makes: to its target, and to the packages Python imports on the way."""
    return {(m, t) for m, target in dispatch for t in (target, *_ancestors(target))}


def _follow(graph: Graph, dispatch) -> Graph:
    exempt = dispatch_edges(dispatch)
    return {m: {d for d in deps if (m, d) not in exempt} for m, deps in graph.items()}


def violations(
    graph: Graph, allowed: dict[str, set[str]], dispatch=frozenset(), layer=package_of
) -> list[str]:
    """Every module that reaches (directly or through others) a layer its own may not reach (a package,
    or with `layer=room_of` a room of testbed/), with the path; a `dispatch` edge is allowed and not
    followed. Modules of layers `allowed` does not name are not checked."""
    edges = _follow(graph, set(dispatch))
    out = []
    for start in sorted(edges):
        package = layer(start)
        if package not in allowed:
            continue
        came_from: dict[str, str | None] = {start: None}
        queue = deque([start])
        while queue:
            module = queue.popleft()
            for dep in sorted(edges.get(module, ())):
                if dep in came_from:
                    continue
                came_from[dep] = module
                queue.append(dep)
                other = layer(dep)
                if other != package and other not in allowed.get(package, set()):
                    path, at = [], dep
                    while at is not None:
                        path.append(at)
                        at = came_from[at]
                    out.append(
                        f"{start} reaches {dep} ({package} may not reach {other}): " + " -> ".join(path[::-1])
                    )
    return out


def package_cycles(graph: Graph, dispatch=frozenset()) -> list[list[str]]:
    """Groups of packages that import each other, directly or through others (a `dispatch` edge
    aside), each sorted; none is the goal."""
    edges = _follow(graph, set(dispatch))
    packages: dict[str, set[str]] = {}
    for module, deps in edges.items():
        package = package_of(module)
        packages.setdefault(package, set()).update(package_of(d) for d in deps if package_of(d) != package)

    def reach(package: str) -> set[str]:
        seen, todo = set(), [package]
        while todo:
            for nxt in packages.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    reaches = {p: reach(p) for p in packages}
    groups = {
        tuple(sorted(q for q in reaches if q == p or (q in reaches[p] and p in reaches[q]))) for p in reaches
    }
    return sorted(list(g) for g in groups if len(g) > 1)


def module_cycles(graph: Graph, dispatch=frozenset()) -> list[list[str]]:
    """Modules importing each other in a circle (a module importing its own package's `__init__` is
    how Python imports it, not an edge back)."""
    edges = _follow(graph, set(dispatch))
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1 visiting, 2 done
    stack: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        stack.append(module)
        for dep in sorted(edges.get(module, ())):
            if module.startswith(dep + "."):
                continue
            if state.get(dep) == 1:
                cycles.append(stack[stack.index(dep) :] + [dep])
            elif dep not in state:
                visit(dep)
        stack.pop()
        state[module] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module)
    return cycles


# ------------------------------------------------------------------ the real tree
@pytest.fixture(scope="module")
def graph() -> Graph:
    return import_graph(REPO)


def test_every_package_reaches_only_what_its_layer_allows(graph):
    assert violations(graph, ALLOWED, DISPATCH) == []


def test_every_room_of_testbed_reaches_only_the_rooms_below_it(graph):
    assert violations(graph, ROOM_ALLOWED, DISPATCH, layer=room_of) == []


def test_every_room_is_a_package_of_testbed():
    assert sorted(room for room in ROOMS) == sorted(
        f"testbed.{p.name}" for p in (REPO / "testbed").iterdir() if (p / "__init__.py").exists()
    )


def test_no_package_cycle(graph):
    assert package_cycles(graph, DISPATCH) == []


def test_no_module_cycle(graph):
    assert module_cycles(graph, DISPATCH) == []


def test_the_one_dispatch_edge_is_the_only_way_into_benchmarks(graph):
    """The exemption is not stale (the CLI entry still dispatches that way), and it is the only edge
    into `benchmarks` from outside it."""
    into = {(m, d) for m, deps in graph.items() for d in deps if package_of(d) == "benchmarks"}
    assert {(m, d) for m, d in into if package_of(m) != "benchmarks"} == dispatch_edges(DISPATCH)
    assert dispatch_edges(DISPATCH) == {
        ("testbed.cli.bench", "benchmarks.runner"),
        ("testbed.cli.bench", "benchmarks"),
    }


def test_the_rules_are_closed_under_reaching():
    """What a package may reach, it may reach through anything it may import."""
    for package, allowed in ALLOWED.items():
        for other in allowed:
            assert ALLOWED[other] <= allowed | {package}, (package, other)


# ------------------------------------------------------------------ the checker, on synthetic trees
def tree(root: Path, files: dict[str, str], packages=PACKAGES) -> Path:
    """Write `files` (path -> source) under root, with an empty `__init__.py` in every package (of
    `packages`, and every directory under them) that has none."""
    for package in packages:
        (root / package).mkdir(parents=True, exist_ok=True)
    for name, source in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    for directory in [p for p in root.rglob("*") if p.is_dir()]:
        if not (directory / "__init__.py").exists():
            (directory / "__init__.py").write_text("")
    return root


def test_a_clean_synthetic_tree_passes(tmp_path):
    root = tree(
        tmp_path,
        {
            "contracts/units.py": "import math\n",
            "client/offload.py": "from contracts import units\nfrom . import worker\n",
            "client/worker.py": "from contracts.units import math\n",
            "agent/verbs.py": "import client.offload\nfrom appliance import shaper\n",
            "appliance/shaper.py": "from contracts import units\nfrom . import tc_ops\n",
            "appliance/tc_ops.py": "from .shaper import ROOT\n",
            "testbed/lab.py": "from analysis import load\nfrom contracts.units import x\n",
            "analysis/load.py": "from contracts import units\n",
            "benchmarks/runner.py": "import testbed.lab\nimport client.offload\n",
            "testbed/cli/bench.py": "def run():\n    from benchmarks import runner\n",
        },
    )
    graph = import_graph(root)
    assert graph["agent.verbs"] >= {"client", "client.offload", "appliance", "appliance.shaper"}
    assert graph["appliance.tc_ops"] == {"appliance", "appliance.shaper"}  # `from .shaper import ROOT`
    assert violations(graph, ALLOWED, DISPATCH) == []
    assert package_cycles(graph, DISPATCH) == []


def test_a_transitive_edge_is_reported_against_every_module_that_reaches_it(tmp_path):
    root = tree(
        tmp_path,
        {
            "testbed/estimate.py": "from contracts import speed\n",
            "contracts/speed.py": "from client.offload import make_operands\n",
            "client/offload.py": "",
        },
    )
    found = violations(import_graph(root), ALLOWED, DISPATCH)
    assert (
        "testbed.estimate reaches client.offload (testbed may not reach client): "
        "testbed.estimate -> contracts.speed -> client.offload" in found
    )
    assert any(v.startswith("contracts.speed reaches client.offload") for v in found)


def test_a_reach_that_only_the_transitive_walk_sees(tmp_path):
    """Each edge is allowed on its own (top -> mid, mid -> low), but top may not reach low, three
    imports away."""
    files = {
        "top/a.py": "import mid.b\n",
        "mid/b.py": "from . import c\n",
        "mid/c.py": "def f():\n    import low.d\n",
        "low/d.py": "",
    }
    graph = import_graph(tree(tmp_path, files, ("top", "mid", "low")), ("top", "mid", "low"))
    rules = {"top": {"mid"}, "mid": {"low"}, "low": set()}
    found = violations(graph, rules)
    assert found and all(v.startswith("top.a reaches low") for v in found)
    assert "top.a -> mid.b -> mid.c -> low.d" in "\n".join(found)


def test_a_relative_import_is_followed(tmp_path):
    """A relative import stays inside its top-level package, so what it adds is reach: `testbed.estimate`
    reaches `client` through `from .helpers import ...`, `testbed.sub.x` through `from .. import lab`."""
    root = tree(
        tmp_path,
        {
            "testbed/estimate.py": "from .helpers import measure\n",
            "testbed/helpers.py": "def measure():\n    from client import offload\n",
            "testbed/sub/x.py": "from .. import lab\n",
            "testbed/lab.py": "import server.app\n",
            "client/offload.py": "",
            "server/app.py": "",
        },
    )
    found = violations(import_graph(root), ALLOWED, DISPATCH)
    assert (
        "testbed.estimate reaches client.offload (testbed may not reach client): "
        "testbed.estimate -> testbed.helpers -> client.offload" in found
    )
    assert (
        "testbed.sub.x reaches server.app (testbed may not reach server): "
        "testbed.sub.x -> testbed.lab -> server.app" in found
    )


def test_a_relative_import_beyond_the_top_level_package_is_refused(tmp_path):
    root = tree(tmp_path, {"contracts/units.py": "from .. import testbed\n"})
    with pytest.raises(ValueError, match="contracts.units: relative import beyond its top-level package"):
        import_graph(root)


def test_relative_imports_within_a_package_resolve_to_its_modules(tmp_path):
    root = tree(
        tmp_path,
        {
            "client/__init__.py": "from . import worker\n",
            "client/worker.py": "from .offload import run\nfrom . import throttle as t\n",
            "client/offload.py": "",
            "client/throttle.py": "",
        },
    )
    graph = import_graph(root)
    assert graph["client"] == {"client.worker"}
    assert graph["client.worker"] == {"client", "client.offload", "client.throttle"}


def test_an_import_inside_a_function_is_reported(tmp_path):
    root = tree(
        tmp_path,
        {
            "testbed/estimate.py": "def measure():\n    if True:\n        from client import offload\n",
            "client/offload.py": "",
            "appliance/shaper.py": "class S:\n    def f(self):\n        import importlib\n"
            "        return importlib.import_module('agent.verbs')\n",
            "agent/verbs.py": "",
        },
    )
    found = violations(import_graph(root), ALLOWED, DISPATCH)
    assert any(v.startswith("testbed.estimate reaches client.offload") for v in found)
    assert any(v.startswith("appliance.shaper reaches agent.verbs") for v in found)


def test_a_room_reaching_a_room_above_it_is_reported(tmp_path):
    root = tree(
        tmp_path,
        {
            "testbed/backends/lab.py": "from testbed.inventory import x\n",
            "testbed/inventory.py": "def x():\n    from testbed.sweep import plan\n",
            "testbed/sweep/plan.py": "from testbed.backends import lab\n",
            "testbed/cli/sweep.py": "from testbed.sweep import plan\n",
        },
    )
    found = violations(import_graph(root), ROOM_ALLOWED, layer=room_of)
    assert (
        "testbed.backends.lab reaches testbed.sweep.plan (testbed.backends may not reach testbed.sweep): "
        "testbed.backends.lab -> testbed.inventory -> testbed.sweep.plan" in found
    )
    assert {line.split(" reaches ")[0] for line in found} == {"testbed.backends.lab", "testbed.inventory"}
    (root / "testbed" / "inventory.py").write_text("def x():\n    pass\n")  # the edge up removed
    assert violations(import_graph(root), ROOM_ALLOWED, layer=room_of) == []


def test_a_package_cycle_is_reported(tmp_path):
    """Even where every edge is allowed on its own: p imports q, q imports p (through a function)."""
    files = {"p/a.py": "import q.b\n", "q/b.py": "def f():\n    from p import a\n"}
    graph = import_graph(tree(tmp_path, files, ("p", "q")), ("p", "q"))
    assert violations(graph, {"p": {"q"}, "q": {"p"}}) == []
    assert package_cycles(graph) == [["p", "q"]]
    assert module_cycles(graph) == [["p.a", "q.b", "p.a"]]


def test_the_testbed_benchmarks_cycle_is_one_only_through_the_dispatch_edge(tmp_path):
    root = tree(
        tmp_path,
        {
            "testbed/cli/bench.py": "def cmd():\n    from benchmarks import runner\n",
            "testbed/estimate.py": "from benchmarks.codecs import marshal_times\n",
            "benchmarks/runner.py": "from testbed import lab\n",
            "benchmarks/codecs.py": "",
            "testbed/lab.py": "",
        },
    )
    graph = import_graph(root)
    found = violations(graph, ALLOWED, DISPATCH)
    assert [v.split(":")[0] for v in found] == [
        "testbed.estimate reaches benchmarks (testbed may not reach benchmarks)",
        "testbed.estimate reaches benchmarks.codecs (testbed may not reach benchmarks)",
    ]
    assert package_cycles(graph, DISPATCH) == [["benchmarks", "testbed"]]  # through estimate
    (root / "testbed/estimate.py").write_text("")
    graph = import_graph(root)
    assert violations(graph, ALLOWED, DISPATCH) == []
    assert package_cycles(graph, DISPATCH) == []
    assert package_cycles(graph) == [["benchmarks", "testbed"]]  # the dispatch edge is the only way


def test_every_test_module_has_a_basename_of_its_own():
    """pytest collects the unit, integration and privileged folders together (rootdir imports): two
    test files of one name stop the whole run at collection."""
    names = [p.name for p in (REPO / "tests").rglob("test_*.py")]
    assert sorted(n for n in set(names) if names.count(n) > 1) == []


def test_the_architecture_page_shows_every_room():
    """docs/architecture.md draws the rooms this test checks: each has its row there."""
    page = (REPO / "docs" / "architecture.md").read_text()
    for room in ROOMS:
        assert f"| `{room.replace('.', '/')}/` |" in page, room

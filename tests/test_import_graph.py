"""The project's modules import each other without cycles, in the layers of the design.

The import graph is read from the source (``ast``), not by importing: every ``import`` and
``from ... import`` of every module counts, at module level, in a class or in a function
(a function-level import that hides a cycle is a cycle). Only imports under
``if TYPE_CHECKING:`` are left out: they never run, and a type named in an annotation (a
processor helper that takes a ``KTable`` handle) is no import-time dependency.

A package is a folder: ``topology/dsl/`` and ``topology/`` are two packages, and a module
belongs to the folder it is in (``__init__.py`` to its own folder). Cycles are looked for
twice: between modules (a cycle there is an import-order accident waiting to happen, and
what makes a module impossible to read alone) and between packages (the layers).
"""

from __future__ import annotations

import ast
import importlib
import itertools
from collections import defaultdict
from collections.abc import Iterator, Mapping
from pathlib import Path

import streams
import streams.testing

ROOT = Path(__file__).resolve().parent.parent

#: The top-level packages, from the top layer down: a package may import the ones after it.
LAYERS = ("streams", "runtime", "topology", "statestores", "common")

#: Longest module allowed in the packages (STYLE: about 400 lines a module).
MAX_MODULE_LINES = 500

Graph = Mapping[str, Mapping[str, list[str]]]


def modules(root: Path) -> dict[str, Path]:
    """Every module of the project's packages: dotted name -> file."""
    found = {}
    for top in LAYERS:
        for path in sorted((root / top).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement of ``tree``, outside ``if TYPE_CHECKING:`` bodies."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                yield from _imports(ast.Module(body=[child], type_ignores=[]))
            continue
        yield from _imports(node)


def imported_modules(name: str, path: Path, known: Mapping[str, Path]) -> set[str]:
    """The project modules ``name`` (at ``path``) imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        for dotted in targets:
            found = dotted
            while found and found not in known:
                found = found.rpartition(".")[0]
            if found:
                out.add(found)
    return out


def module_graph(root: Path = ROOT) -> dict[str, dict[str, list[str]]]:
    """Module -> imported module -> the import making that edge (``a.b -> c.d``)."""
    known = modules(root)
    return {
        name: {
            target: [f"{name} -> {target}"]
            for target in sorted(imported_modules(name, path, known))
            if target != name
        }
        for name, path in known.items()
    }


def package_of(name: str, known: Mapping[str, Path]) -> str:
    return name if known[name].name == "__init__.py" else name.rpartition(".")[0]


def import_graph(root: Path = ROOT) -> dict[str, dict[str, list[str]]]:
    """Package -> imported package -> the imports making that edge (``a.b -> c.d``)."""
    known = modules(root)
    graph: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for name, path in known.items():
        source = package_of(name, known)
        graph[source]  # every package is a node, with or without edges
        for target in imported_modules(name, path, known):
            dest = package_of(target, known)
            if dest != source:
                graph[source][dest].append(f"{name} -> {target}")
    return {p: dict(edges) for p, edges in graph.items()}


def package_cycles(graph: Graph) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) per strongly connected group of packages."""
    return [_cycle_in(group, graph) for group in strongly_connected(graph)]


def strongly_connected(graph: Graph) -> list[list[str]]:
    """The groups of two or more packages that import each other, directly or not."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan; the graph is a few dozen packages deep at most
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, {})):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return groups


def _cycle_in(group: list[str], graph: Graph) -> list[str]:
    """A shortest cycle through the first package of ``group``, within the group."""
    start, members = group[0], set(group)
    paths = {start: [start]}
    todo = [start]
    while todo:
        v = todo.pop(0)
        for w in sorted(graph.get(v, {})):
            if w == start:
                return [*paths[v], start]
            if w in members and w not in paths:
                paths[w] = [*paths[v], w]
                todo.append(w)
    raise AssertionError(f"no cycle in {group}")  # pragma: no cover - Tarjan found one


def describe_cycle(cycle: list[str], graph: Graph) -> str:
    lines = [" -> ".join(cycle)]
    for a, b in itertools.pairwise(cycle):
        shown = sorted(graph[a][b])
        more = f" (+{len(shown) - 3} more)" if len(shown) > 3 else ""
        lines.append(f"  {a} -> {b}: {'; '.join(shown[:3])}{more}")
    return "\n".join(lines)


def test_no_package_import_cycle() -> None:
    graph = import_graph()
    groups = strongly_connected(graph)
    assert not groups, "package import cycles:\n" + "\n".join(
        f"{describe_cycle(_cycle_in(g, graph), graph)}\n  (all of {', '.join(g)} are in cycles)"
        for g in groups
    )


def test_top_level_packages_import_only_the_layers_below() -> None:
    graph = import_graph()
    wrong = [
        f"{a} -> {b}: {edges[0]}"
        for a, targets in graph.items()
        for b, edges in targets.items()
        if LAYERS.index(b.split(".")[0]) < LAYERS.index(a.split(".")[0])
    ]
    assert not wrong, f"imports against the layers {' -> '.join(LAYERS)}:\n" + "\n".join(wrong)


def test_the_cycle_finder_names_a_cycle(tmp_path: Path) -> None:
    for name, text in {
        "common/__init__.py": "",
        "common/a.py": "from statestores import b\n",
        "statestores/__init__.py": "",
        "statestores/b.py": "def f():\n    from common.deep import c\n",
        "common/deep/__init__.py": "",
        "common/deep/c.py": "from typing import TYPE_CHECKING\nimport common.a\n"
        "if TYPE_CHECKING:\n    from streams import d\n",
        "streams/__init__.py": "from . import d\n",
        "streams/d.py": "import common.a\n",
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    graph = import_graph(tmp_path)
    assert package_cycles(graph) == [["common", "statestores", "common.deep", "common"]]
    assert "streams" not in graph["common.deep"]  # TYPE_CHECKING imports are left out
    assert graph["streams"]["common"] == ["streams.d -> common.a"]


def test_no_module_import_cycle() -> None:
    graph = module_graph()
    groups = strongly_connected(graph)
    assert not groups, "module import cycles:\n" + "\n".join(
        f"{describe_cycle(_cycle_in(g, graph), graph)}\n  (all of {', '.join(g)} are in cycles)"
        for g in groups
    )


def test_the_module_cycle_finder_sees_function_level_imports(tmp_path: Path) -> None:
    for name, text in {
        "common/__init__.py": "",
        "common/a.py": "from common import b\n",
        "common/b.py": "def f():\n    from common.a import x\n",
        "common/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import common.d\n",
        "common/d.py": "import common.c\n",
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert strongly_connected(module_graph(tmp_path)) == [["common.a", "common.b"]]


def test_no_module_is_over_500_lines() -> None:
    long = {
        path.relative_to(ROOT).as_posix(): n
        for top in LAYERS
        for path in sorted((ROOT / top).rglob("*.py"))
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_the_public_paths_name_the_kernel_objects() -> None:
    """The facade keeps the public paths of the kernel modules (``streams.<module>``)."""
    for leaf in ("errors", "serdes", "config", "handlers"):
        public = importlib.import_module(f"streams.{leaf}")
        kernel = importlib.import_module(f"common.{leaf}")
        names = getattr(kernel, "__all__", [n for n in vars(kernel) if not n.startswith("_")])
        assert all(getattr(public, n) is getattr(kernel, n) for n in names), public.__name__
    assert streams.Serdes is importlib.import_module("common.serdes").Serdes
    driver = importlib.import_module("streams.testkit.driver")
    assert streams.testing.TopologyTestDriver is driver.TopologyTestDriver
    assert streams.testing.crashtest.__module__ == "streams.crash.harness"

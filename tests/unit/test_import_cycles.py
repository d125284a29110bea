"""No import circle among the project's modules: a protocol never imports its implementations.

The graph is parsed from the source with ``ast``: every ``import`` statement is an arrow, also
one inside a function (a lazy import still ties the two files together) and one under
``TYPE_CHECKING``. A node is one file; ``from a.b import c`` points at ``a/b/c.py`` when that is a
module, else at ``a/b.py`` (or ``a/b/__init__.py``). A circle is a strongly connected component of
more than one file.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"ratchet", "ingest", "rewards", "trainer", "gating", "deploy", "policy", "tasks",
            "runtime", "simulation", "bench", "experiments"}


def module_files(root: Path, packages: set[str]) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` under the packages (``__init__`` is the
    package itself)."""
    out: dict[str, Path] = {}
    for package in sorted(packages):
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _targets(node: ast.AST, here: str, is_package: bool, modules: dict[str, Path]) -> set[str]:
    """The project modules one import statement in module ``here`` points at."""
    found: set[str] = set()
    if isinstance(node, ast.Import):
        for alias in node.names:
            name = alias.name
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name:
                found.add(name)
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            base = here.split(".") if is_package else here.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            module = ".".join(base + ([node.module] if node.module else []))
        else:
            module = node.module or ""
        for alias in node.names:
            if f"{module}.{alias.name}" in modules:
                found.add(f"{module}.{alias.name}")
            elif module in modules:
                found.add(module)
    return found


def import_graph(root: Path, packages: set[str]) -> dict[str, set[str]]:
    """Module -> the project modules it imports anywhere in its source."""
    modules = module_files(root, packages)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        is_package = path.name == "__init__.py"
        edges: set[str] = set()
        for node in ast.walk(tree):
            edges |= _targets(node, name, is_package, modules)
        graph[name] = edges - {name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(start: str) -> None:
        nonlocal counter
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
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


def _describe(component: list[str], graph: dict[str, set[str]]) -> str:
    members = set(component)
    arrows = [f"  {a} -> {b}" for a in component for b in sorted(graph[a] & members)]
    return "circle of " + ", ".join(component) + ":\n" + "\n".join(arrows)


def test_no_import_circle_among_the_project_modules() -> None:
    graph = import_graph(ROOT, PACKAGES)
    assert len(graph) > 100  # the parser found the tree
    found = circles(graph)
    assert not found, "\n".join(_describe(c, graph) for c in found)


def test_no_import_circle_among_the_packages() -> None:
    """Packages reach each other through no chain of files either (``runtime`` -> ``policy`` ->
    ``tasks`` -> ``runtime`` is a circle although no two of its files import each other)."""
    packages: dict[str, set[str]] = {}
    for module, targets in import_graph(ROOT, PACKAGES).items():
        top = module.split(".")[0]
        packages.setdefault(top, set()).update(t.split(".")[0] for t in targets if
                                               not t.startswith(top + ".") and t != top)
    found = circles(packages)
    assert not found, "circles of packages: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_protocols_import_no_implementation() -> None:
    graph = import_graph(ROOT, PACKAGES)
    assert not graph["policy.base"] & {"policy.toy.adapter", "policy.hf"}
    assert not graph["policy.config"] & {"policy.toy.adapter", "policy.hf", "policy.loader"}


def test_the_finder_sees_a_lazy_circle(tmp_path: Path) -> None:
    """A circle closed only by an import inside a function is still found, and named."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "proto.py").write_text(
        "def pick():\n    from pkg.sub.impl import Impl\n    return Impl\n")
    (pkg / "sub" / "impl.py").write_text("from ..proto import pick\n\nclass Impl: ...\n")
    (pkg / "free.py").write_text("import pkg.proto\n")
    graph = import_graph(tmp_path, {"pkg"})
    assert graph["pkg.sub.impl"] == {"pkg.proto"}
    assert circles(graph) == [["pkg.proto", "pkg.sub.impl"]]


@pytest.mark.parametrize("edges,expected", [
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}}, [["a", "b"], ["c", "d"]]),
])
def test_circles_on_hand_built_graphs(edges: dict[str, set[str]], expected) -> None:
    assert circles(edges) == expected

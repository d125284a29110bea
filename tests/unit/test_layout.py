"""The package graph flows one way: orchestrator on top, stages below, shared floor at the bottom.

Parsed from the source (every import statement, also those inside functions), so a lazy import
that reaches upward fails here too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOP = {"ratchet"}
STAGES = {"ingest", "rewards", "trainer", "gating", "deploy"}
FLOOR = {"policy", "tasks", "runtime"}
SIMULATION = {"simulation"}
"""Stands in for the outside world (users of an IDE): a stage that may use the others, imported
only by the orchestrator (its demo), benchmarks and tests."""
PACKAGES = TOP | STAGES | FLOOR | SIMULATION


def _imported_packages(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found & PACKAGES


def _allowed(package: str) -> set[str]:
    if package in TOP:
        return PACKAGES
    if package in STAGES | SIMULATION:
        return STAGES | FLOOR | {package}
    return FLOOR


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_imports_flow_downward(package: str) -> None:
    wrong = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for target in _imported_packages(path) - _allowed(package):
            wrong.append(f"{path.relative_to(ROOT)} imports {target}")
    assert not wrong, "\n".join(wrong)


def _package_graph() -> dict[str, set[str]]:
    return {package: set().union(*(_imported_packages(path)
                                   for path in (ROOT / package).rglob("*.py"))) - {package}
            for package in PACKAGES}


def _a_circle(graph: dict[str, set[str]]) -> list[str]:
    """One circle of ``graph`` as the list of its packages (first repeated last), or []."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str]:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt, path + [nxt])):
                return found
        state[node] = 2
        return []

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return []


def test_the_packages_form_no_circle() -> None:
    """Every package stands on a floor of its own: no two packages reach each other through any
    chain of imports (the floor's three packages among themselves included)."""
    circle = _a_circle(_package_graph())
    assert not circle, " -> ".join(circle)


@pytest.mark.parametrize("edges,expected", [
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
    ({"a": {"b"}, "b": {"c"}, "c": {"b"}}, ["b", "c", "b"]),
])
def test_a_circle_on_hand_built_graphs(edges, expected) -> None:
    assert _a_circle(edges) == expected


def test_nothing_imports_the_orchestrator() -> None:
    for package in STAGES | FLOOR:
        for path in (ROOT / package).rglob("*.py"):
            assert "ratchet" not in _imported_packages(path), path


def test_what_ships_never_imports_the_simulated_users() -> None:
    for package in STAGES | FLOOR:
        for path in (ROOT / package).rglob("*.py"):
            assert "simulation" not in _imported_packages(path), path


def test_each_concern_of_deploy_is_one_folder() -> None:
    """deploy/ holds a replica and a fleet, nothing flat beside them."""
    flat = sorted(p.name for p in (ROOT / "deploy").glob("*.py") if p.name != "__init__.py")
    assert flat == []
    assert {p.name for p in (ROOT / "deploy").iterdir() if p.is_dir()} >= {"replica", "fleet"}

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

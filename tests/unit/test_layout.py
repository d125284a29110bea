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
PACKAGES = TOP | STAGES | FLOOR


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
    if package in STAGES:
        return STAGES | FLOOR
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

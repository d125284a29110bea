"""bench/ holds benchmarks only, and docs/BENCHMARKS.md lists each of them: every bench/*.py but
the shared helpers (``_common``) and the result stamp (``provenance``) is named in a table row of
that page, and every benchmark the page's tables name is a file in bench/."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOT_BENCHMARKS = {"__init__.py", "_common.py", "provenance.py"}


def _listed() -> set[str]:
    rows = [line for line in (ROOT / "docs" / "BENCHMARKS.md").read_text().splitlines()
            if line.startswith("| `")]
    return {m.group(1) for line in rows if (m := re.match(r"\| `([a-z0-9_]+\.py)` \|", line))}


def test_every_benchmark_is_listed_and_every_listed_one_exists() -> None:
    files = {p.name for p in (ROOT / "bench").glob("*.py")} - NOT_BENCHMARKS
    listed = _listed()
    assert not files - listed, f"in bench/ but not in docs/BENCHMARKS.md: {sorted(files - listed)}"
    assert not listed - files, f"in docs/BENCHMARKS.md but not in bench/: {sorted(listed - files)}"


def test_experiments_stay_out_of_bench() -> None:
    moved = {p.name for p in (ROOT / "experiments").glob("*.py")}
    assert moved, "experiments/ holds the concluded studies"
    assert not moved & {p.name for p in (ROOT / "bench").glob("*.py")}

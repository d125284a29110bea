"""tasks/data/README.md names every file of tasks/data, and every file it names exists."""

from __future__ import annotations

import re
from pathlib import Path

DATA = Path(__file__).resolve().parents[3] / "tasks" / "data"


def test_the_manifest_names_every_data_file_and_nothing_else() -> None:
    text = (DATA / "README.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    named = {name for line in rows
             for name in re.findall(r"`([\w/.]+\.jsonl?)`", line.split("|")[1])}
    files = {str(p.relative_to(DATA)) for p in DATA.rglob("*")
             if p.is_file() and p.name != "README.md"}
    assert not files - named, f"in tasks/data, not in its README: {sorted(files - named)}"
    assert not named - files, f"in the README, not in tasks/data: {sorted(named - files)}"

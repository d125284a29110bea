"""Where a benchmark figure comes from: the code's commit, the machine and its load.

Every figure names its commit, machine and load. ``commit()`` is the short hash of ``HEAD`` with
``+dirty`` when tracked files differ from it (such a run is not reproducible from the commit
alone; untracked files, a run's own output among them, do not count); ``machine()`` describes the
host from what it reports, never from a fixed string; ``stamp()`` is the four fields a result
file carries.
"""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


def commit(root: Path = ROOT) -> str:
    """``HEAD``'s short hash, ``+dirty`` when tracked files changed; ``unknown`` outside git."""
    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)

    try:
        head = git("rev-parse", "--short", "HEAD")
        changed = git("status", "--porcelain", "--untracked-files=no")
    except OSError:
        return "unknown"
    if head.returncode != 0:
        return "unknown"
    return head.stdout.strip() + ("+dirty" if changed.stdout.strip() else "")


def _memory_gb() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            kb = next(int(line.split()[1]) for line in f if line.startswith("MemTotal:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return None
    return round(kb / 2**20)


def machine() -> str:
    """``"2-core x86_64, 23 GB"``: cores, architecture and memory as the host reports them."""
    gb = _memory_gb()
    return f"{os.cpu_count()}-core {platform.machine()}" + (f", {gb} GB" if gb else "")


def load1() -> float:
    return round(os.getloadavg()[0], 2)


def stamp(root: Path = ROOT) -> dict:
    """``date``, ``commit``, ``machine`` and ``load1`` now."""
    return {"date": now(), "commit": commit(root), "machine": machine(), "load1": load1()}

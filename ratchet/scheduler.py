"""`ratchet loop`: run a cycle every N hours, forever or a fixed number of times.

A cycle that fails is logged and the loop goes on at the next tick (a scheduled retraining loop
must not die on one bad span). Ticks are anchored to the start time, so a slow cycle does not push
every later one back; a cycle that overruns its slot makes the next start at once.
Two schedulers on one model are safe: each cycle holds the model's lease (runtime/lease.py) and
resumes an unfinished cycle first (ratchet/cycle.py); the second waits or its tick fails with a
"locked by another cycle" message, and the loop goes on.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


MIN_EVERY_S = 60.0
"""The shortest loop period accepted: a cycle takes minutes, ``0s`` would be a tight loop."""


def parse_duration(text: str) -> float:
    """'90s', '15m', '5h', '1d', '1h30m' -> seconds. Raises ValueError naming the input."""
    parts = re.findall(r"(\d+(?:\.\d+)?)([smhd])", text.strip())
    if not parts or "".join(n + u for n, u in parts) != text.strip():
        raise ValueError(f"cannot parse duration {text!r}: use e.g. '5h', '15m', '1h30m'")
    return sum(float(n) * _UNITS[u] for n, u in parts)


def parse_period(text: str) -> float:
    """A loop period: a duration of at least :data:`MIN_EVERY_S`."""
    seconds = parse_duration(text)
    if seconds < MIN_EVERY_S:
        raise ValueError(f"--every {text!r} is {seconds:g} s; the shortest period is "
                         f"{MIN_EVERY_S:g} s (a cycle takes minutes)")
    return seconds


def run_every(
    every_s: float,
    tick: Callable[[int], object],
    *,
    max_cycles: int | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Call ``tick(i)`` every ``every_s`` seconds; returns how many ticks ran."""
    start = clock()
    i = 0
    while max_cycles is None or i < max_cycles:
        try:
            tick(i)
        except Exception:
            log.exception("cycle %d failed; the loop goes on", i)
        i += 1
        if max_cycles is not None and i >= max_cycles:
            break
        sleep(max(0.0, start + i * every_s - clock()))
    return i

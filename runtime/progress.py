"""Progress of long steps: a bar on a terminal, a line per quarter with an ETA otherwise.

``with Progress("warm start", total=300) as p: ... p.update()`` draws a ``tqdm`` bar on stderr
when stderr is a terminal at least ``BAR_MIN_COLUMNS`` wide. Without one (or on a terminal that
reports no width, as some CI logs do) (CI, a log file, ``make demo | tee``) it logs a
line at each quarter of the work once the step has run 10 s (but not within 10 s of its previous
line), or after 20 s without one, with the rate and the time left, and one when done (a step
that showed no line before puts its done line in the log file only: the caller's summary gives
its time). A heartbeat thread keeps that promise even while one unit of work runs for minutes (a
training step on a loaded machine): it logs the status, or redraws the bar with its elapsed
time, whenever 20 s passed without a line.

The 20-s promise holds for the terminal as a whole: a heartbeat is due only when nothing at all
was shown for 20 s (ratchet/console.py reports each line it shows), and :class:`Heartbeat` keeps
it across steps that have no progress of their own.

Deliberately left out: nesting and multi-process bars.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from types import TracebackType
from typing import Self

log = logging.getLogger("ratchet.progress")

STEP = 0.25
"""Without a terminal, a line each time this share of the work is done..."""

SHORT_S = 10.0
"""A step is only reported by its quarters once it has run this long (a step of seconds prints
just its "done" line), and a quarter only this long after the step's previous line."""

QUIET_S = 18.0
"""...or when this many seconds passed since the last line (also while no update comes): below
20 s, so that with the watchers' one-second tick and a loaded machine's delays no silence
reaches 20 s."""

RATE_AFTER_S = 2.0
"""A step younger than this shows no rate or time left (a first batch done in milliseconds
would claim thousands per second)."""


BAR_MIN_COLUMNS = 20
"""Narrower terminals (a width of 0 is what some CI consoles report) get lines, not a bar."""


def bar_fits(stream) -> bool:
    """Whether ``stream`` is a terminal wide enough for a bar."""
    try:
        return stream.isatty() and os.get_terminal_size(stream.fileno()).columns >= BAR_MIN_COLUMNS
    except (AttributeError, OSError, ValueError):
        return False


_terminal = {"last": time.monotonic(), "progress": 0}
"""When the terminal last showed a line, and how many :class:`Progress` are open (a
:class:`Heartbeat` leaves a silence to them: their lines say more)."""
_terminal_lock = threading.Lock()


def note_terminal_line() -> None:
    """The terminal just showed a line (ratchet/console.py calls this for every line it shows)."""
    with _terminal_lock:
        _terminal["last"] = time.monotonic()


def _claim_quiet(own_last: float) -> bool:
    """True (and the terminal's clock reset) when neither the caller (its last line at
    ``own_last``) nor anything else has shown a line for ``QUIET_S``: one heartbeat per silence,
    however many steps are watching."""
    with _terminal_lock:
        now = time.monotonic()
        if now - max(own_last, _terminal["last"]) < QUIET_S:
            return False
        _terminal["last"] = now
        return True


class Heartbeat:
    """``with Heartbeat("cycle 3: ingest"):`` logs "cycle 3: ingest running, 40 s" whenever the
    terminal showed no line for ``QUIET_S`` while the block runs: a step without its own
    :class:`Progress` (or a chain of short ones) is never silent for longer."""

    def __init__(self, desc: str) -> None:
        self.desc = desc
        self._t0 = time.monotonic()
        self._last = float("-inf")  # quiet since the terminal's last line, not since the start
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-{desc}", daemon=True)

    def _beat(self) -> None:
        while not self._stop.wait(1.0):
            if not _terminal["progress"] and _claim_quiet(self._last):
                self._last = time.monotonic()
                log.info("%s running, %.0f s", self.desc, self._last - self._t0)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(2.0)


class Progress:
    """Counts ``update(n)`` calls against ``total`` for one named step."""

    def __init__(self, desc: str, total: int, *, unit: str = "it", bar: bool | None = None):
        self.desc, self.total, self.unit = desc, max(int(total), 0), unit
        self.done = 0
        self._t0 = time.monotonic()
        self._next_line = STEP
        self._last_line = self._t0
        self._reported = False
        """Whether a line (or the bar) has shown this step's progress on the terminal."""
        use_bar = bar_fits(sys.stderr) if bar is None else bar
        self._bar = None
        if use_bar and self.total:
            from tqdm import tqdm

            self._bar = tqdm(total=self.total, desc=desc, unit=unit, leave=False,
                             file=sys.stderr, mininterval=0.5, dynamic_ncols=True)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._heartbeat = threading.Thread(target=self._beat, name=f"progress-{desc}",
                                           daemon=True)
        with _terminal_lock:
            _terminal["progress"] += 1
        self._heartbeat.start()

    def _beat(self) -> None:
        while not self._stop.wait(1.0):
            with self._lock:
                if self.done >= self.total > 0 or not _claim_quiet(self._own_last()):
                    continue
                self._last_line = time.monotonic()
                if self._bar is not None:
                    self._bar.refresh()  # the bar's elapsed time moves
                else:
                    log.info("%s: %s (still working)", self.desc, self.status())
                self._reported = True

    def update(self, n: int = 1) -> None:
        with self._lock:
            self.done += n
            if self._bar is not None:
                self._bar.update(n)
                self._last_line, self._reported = time.monotonic(), True
                return
            if not self.total or self.done >= self.total:
                return
            now = time.monotonic()
            quarter = (self.done / self.total >= self._next_line and now - self._t0 >= SHORT_S
                       and now - self._last_line >= SHORT_S)
            if quarter or _claim_quiet(self._own_last()):
                log.info("%s: %s", self.desc, self.status())
                self._last_line, self._reported = now, True
                while self._next_line <= self.done / self.total:
                    self._next_line += STEP

    def _own_last(self) -> float:
        """This step's last line; before its first, the terminal's last line is what counts."""
        return self._last_line if self._reported else float("-inf")

    def status(self) -> str:
        """'120/300 it, 4.1 it/s, ~44 s left'; 'just started' before a rate means anything."""
        elapsed = max(time.monotonic() - self._t0, 1e-9)
        if elapsed < RATE_AFTER_S:
            return f"{self.done}/{self.total} {self.unit}, just started"
        rate = self.done / elapsed
        left = (self.total - self.done) / rate if rate > 0 else float("inf")
        eta = f"~{left:.0f} s left" if left != float("inf") else "time left unknown"
        return f"{self.done}/{self.total} {self.unit}, {rate:.1f} {self.unit}/s, {eta}"

    def close(self) -> None:
        if not self._stop.is_set():
            with _terminal_lock:
                _terminal["progress"] -= 1
        self._stop.set()
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
        if exc_type is None:  # a step of seconds: its done line is for the log file only
            log.info("%s: done, %d %s in %.1f s", self.desc, self.done, self.unit,
                     time.monotonic() - self._t0, extra={"terminal": self._reported})

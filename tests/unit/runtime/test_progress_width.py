"""A terminal that reports no width gets progress lines, not an invisible bar."""

import fcntl
import os
import struct
import sys
import termios

import pytest

from runtime.progress import Progress, bar_fits


def _pty(columns: int):
    main_fd, child_fd = os.openpty()
    fcntl.ioctl(child_fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    return main_fd, os.fdopen(child_fd, "w")


@pytest.mark.parametrize(("columns", "bar"), [(0, False), (10, False), (80, True)])
def test_bar_only_on_a_terminal_wide_enough(columns, bar, monkeypatch):
    main_fd, term = _pty(columns)
    try:
        assert bar_fits(term) is bar
        monkeypatch.setattr(sys, "stderr", term)
        with Progress("step", total=4) as p:
            assert (p._bar is not None) is bar
            p.update(4)
    finally:
        term.close()
        os.close(main_fd)


def test_not_a_terminal_gets_lines(tmp_path):
    with open(tmp_path / "log", "w") as f:
        assert not bar_fits(f)

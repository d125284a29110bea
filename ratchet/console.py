"""What the operator sees: ratchet's own lines and real warnings on the terminal, everything in a
log file in the workdir.

Library chatter — Beam's type-hint notices, MLflow's run links and warnings, kafka-python's
connection errors at shutdown, Ray and DeepSpeed start-up lines — goes to the log file only.
The terminal gets INFO from ratchet's packages, and WARNING or worse from anything that is not
on the chatter list. Python ``warnings`` are captured into the log file. A record logged with
``extra={"terminal": False}`` (a detail a summary line repeats: a stage's seconds, the gate's
verdict before the cycle's row) goes to the log file only.

Deliberately left out: progress bars (runtime/progress.py draws them on stderr).
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from runtime.progress import note_terminal_line

OWN = ("ratchet", "ingest", "rewards", "trainer", "gating", "deploy", "policy", "tasks", "runtime")
"""Loggers whose INFO lines are ratchet's own narrative."""

CHATTER = (
    "apache_beam", "kafka", "mlflow", "urllib3", "httpx", "httpcore", "ray", "deepspeed",
    "alembic", "py.warnings", "great_expectations", "matplotlib", "filelock", "torch",
    "transformers", "huggingface_hub", "fsspec", "botocore", "uvicorn",
)
"""Loggers that never reach the terminal: their records go to the log file only."""

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class TerminalFilter(logging.Filter):
    """Keep ratchet's INFO lines and other loggers' warnings; drop the chatter list."""

    def __init__(self, verbose: bool = False) -> None:
        super().__init__()
        self.verbose = verbose

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "terminal", True) is False:
            return self.verbose
        name = record.name
        if _under(name, CHATTER) or "apache_beam" in record.pathname:  # Beam logs via root too
            return self.verbose
        if _under(name, OWN):
            return record.levelno >= (logging.DEBUG if self.verbose else logging.INFO)
        return record.levelno >= logging.WARNING


class _Terminal(logging.StreamHandler):
    """The terminal's handler: tells runtime/progress.py when it showed a line, so heartbeats
    fill only real silences."""

    def emit(self, record: logging.LogRecord) -> None:
        super().emit(record)
        note_terminal_line()


def _under(name: str, roots: tuple[str, ...]) -> bool:
    return any(name == r or name.startswith(r + ".") for r in roots)


def quiet_accelerator_guess() -> None:
    """DeepSpeed warns on every import that detects no GPU: name the CPU accelerator where there
    is none (an explicit ``DS_ACCELERATOR`` wins)."""
    if not Path("/dev/nvidiactl").exists():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")


def setup(log_file: Path | None, *, verbose: bool = False) -> None:
    """Route logging: the terminal (filtered) and, if given, ``log_file`` (everything)."""
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    os.environ.setdefault("MLFLOW_CONFIGURE_LOGGING", "false")  # else its own stderr handler
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # transformers' load/save bars
    quiet_accelerator_guess()
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.setLevel(logging.DEBUG)
    terminal = _Terminal(sys.stderr)
    terminal.setFormatter(logging.Formatter("%(asctime)s %(message)s", datefmt="%H:%M:%S"))
    terminal.addFilter(TerminalFilter(verbose))
    root.addHandler(terminal)
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        to_file = logging.FileHandler(log_file)
        to_file.setFormatter(logging.Formatter(LOG_FORMAT))
        to_file.setLevel(logging.DEBUG if verbose else logging.INFO)  # DEBUG: 12 MB a demo
        root.addHandler(to_file)
    logging.captureWarnings(True)
    for name in ("urllib3", "kafka", "httpx", "httpcore", "matplotlib", "filelock"):
        logging.getLogger(name).setLevel(logging.INFO if verbose else logging.WARNING)

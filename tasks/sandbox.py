"""Run untrusted model code in a sandboxed subprocess.

Each program runs as ``python -I -S program.py`` in a fresh scratch directory, in its own process
group and session, with:

- a wall-clock timeout (the whole group is SIGKILLed when it expires),
- ``setrlimit`` caps on address space, CPU seconds, file size and core dumps (set by a small
  launcher in the child, which then execs the program),
- no network: a new network namespace (only the loopback, and it down) where the kernel allows
  it (root / CAP_SYS_ADMIN), and in every case a prelude that replaces ``socket.socket`` and
  ``socket.create_connection`` with functions that raise,
- an empty environment apart from PATH, HOME and TMPDIR (both the scratch directory).

A program that hangs, crashes, runs out of memory or exits non-zero is a failure; nothing the
program does can hang or crash the caller.

Deliberately left out: syscall filtering (seccomp) and a read-only root filesystem — this is a
guard against accidents and runaway model code on a CI box, not a jail for adversaries.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

CLONE_NEWNET = 0x40000000

_PRELUDE = '''\
import socket as _s
def _no_network(*a, **k):
    raise OSError("network access is disabled in the sandbox")
_s.socket = _no_network
_s.create_connection = _no_network
_s.socketpair = _no_network
del _s
'''

Status = Literal["passed", "failed", "timeout", "crashed"]


@dataclass(frozen=True)
class SandboxResult:
    """How a sandboxed program ended. ``passed`` iff it exited 0 within the limits."""

    status: Status
    returncode: int | None
    seconds: float
    stdout: str
    stderr: str
    isolated_network: bool

    @property
    def passed(self) -> bool:
        return self.status == "passed"


# Runs first in the child: limits itself, (optionally) leaves the network, then execs the
# program. Done in the child rather than in a preexec_fn, which is unsafe in a threaded parent.
_LAUNCHER = f"""
import ctypes, os, resource, sys
CLONE_NEWNET = {CLONE_NEWNET}
mem, cpu, fsize, netns, program = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), \\
    sys.argv[4] == "1", sys.argv[5]
resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
if netns and ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWNET) != 0:
    sys.exit(112)
os.execv(sys.executable, [sys.executable, "-I", "-S", program])
"""


_NETNS_OK: bool | None = None


def network_namespace_available() -> bool:
    """Whether this process may create a network namespace (probed once, in a child)."""
    global _NETNS_OK
    if _NETNS_OK is None:
        probe = subprocess.run(
            [sys.executable, "-I", "-S", "-c",
             f"import ctypes,sys; sys.exit(ctypes.CDLL(None).unshare({CLONE_NEWNET}) != 0)"],
            capture_output=True, timeout=30,
        )
        _NETNS_OK = probe.returncode == 0
    return _NETNS_OK


def _status(returncode: int) -> Status:
    if returncode == 0:
        return "passed"
    if returncode < 0 and -returncode == signal.SIGXCPU:
        return "timeout"
    return "crashed" if returncode < 0 else "failed"


def run_sandboxed(
    code: str,
    *,
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    cpu_s: int | None = None,
    file_mb: int = 16,
    scratch_root: Path | None = None,
    stdin: bytes | None = None,
) -> SandboxResult:
    """Run ``code`` as a Python program in the sandbox and report how it ended; ``stdin`` is
    what the program reads on its standard input (empty when None)."""
    if timeout_s <= 0 or memory_mb < 32:
        raise ValueError(f"need timeout_s > 0 and memory_mb >= 32, got {timeout_s}, {memory_mb}")
    isolate = network_namespace_available()
    scratch = Path(tempfile.mkdtemp(prefix="sandbox-", dir=scratch_root))
    try:
        program = scratch / "program.py"
        program.write_text(_PRELUDE + code)
        return _run(program, scratch, timeout_s, memory_mb, cpu_s, file_mb, isolate, stdin)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _run(program: Path, scratch: Path, timeout_s: float, memory_mb: int, cpu_s: int | None,
         file_mb: int, isolate: bool, stdin: bytes | None = None) -> SandboxResult:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(scratch), "TMPDIR": str(scratch)}
    cpu = cpu_s if cpu_s is not None else max(1, int(timeout_s) + 1)
    start = time.perf_counter()
    argv = [sys.executable, "-I", "-S", "-c", _LAUNCHER, str(memory_mb * 2**20), str(cpu),
            str(file_mb * 2**20), "1" if isolate else "0", str(program)]
    proc = subprocess.Popen(
        argv, cwd=scratch, env=env, stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, start_new_session=True,
    )
    try:
        out, err = proc.communicate(input=stdin, timeout=timeout_s)
        status = _status(proc.returncode)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the group this call created, nothing else
        out, err = proc.communicate()
        status = "timeout"
    return SandboxResult(
        status=status, returncode=proc.returncode, seconds=time.perf_counter() - start,
        stdout=out.decode(errors="replace")[-2000:], stderr=err.decode(errors="replace")[-2000:],
        isolated_network=isolate,
    )

"""Run untrusted code (a model's answer, a suite's hidden asserts) in a bubblewrap box.

Each program runs as ``python -I -S program.py`` inside ``bwrap`` (Debian's ``bubblewrap``), with
every layer below; :func:`sandbox_layers` probes them once, and when one does not hold
:func:`run_sandboxed` raises :class:`SandboxUnavailable` naming it rather than run the code
unboxed.

- **Identity**: uid/gid 65534 inside and outside (when the caller is root, bwrap itself runs as
  65534), no capabilities, ``no_new_privs``; a fresh user namespace in which no further one can
  be made (``--disable-userns``).
- **Namespaces**: new user, pid, mount, network, ipc, uts and cgroup namespaces. The network
  namespace has only a loopback that is down; the pid namespace shows only the box's processes,
  and its own ``/proc``.
- **Files**: a tmpfs root, read-only after set-up, holding only a read-only interpreter image
  (the interpreter, its shared library and its standard library, without site-packages; hard
  links of the caller's installation staged once per process, or the installation itself when
  uid 65534 may read it), the shared libraries under ``/usr/lib``, a minimal read-only ``/dev``
  (its ``/dev/shm`` a tmpfs of 4 MB) and one writable scratch tmpfs capped at ``scratch_mb`` (the
  working directory, HOME and TMPDIR).
  Nothing of the host's ``/etc``, ``/tmp``, home folders or the checkout is there.
- **System calls**: the seccomp program of :mod:`tasks.seccomp` (namespaces, mounts, ptrace,
  kernel keys, modules, BPF, io_uring, ...; sockets other than ``AF_UNIX``).
- **Limits** (rlimits set inside the box before the program starts): address space
  ``memory_mb``, CPU seconds, file size ``file_mb``, no core dumps, and at most ``max_procs``
  processes and threads (counted per box: the box's user namespace has its own count).
- **Time**: a wall-clock deadline. When it passes, or as soon as the program itself exits, the
  box's pid 1 dies and the kernel kills every process left in the pid namespace (setsid
  sleepers, double forks); the call waits until the namespace is empty. Pipes are read as they
  fill, keeping only their tails, so a program that floods or holds them cannot stall the caller.
- **Output**: ``stdout`` keeps its last 64 KiB and ``stderr`` its last 2,000 characters, both
  scrubbed (:func:`scrub`) of the caller's environment values and of key material before they
  leave this module.
- **A private channel** (``channel=``): two pipes beside stdio, one in and one out, whose numbers
  the program gets as its two arguments. Secrets travel there, never on stdio: the box's pid 1
  (bwrap's init) keeps the program's stdin, stdout and stderr open for its whole life, and when
  the caller is not root those pipes belong to the box's own user, so any process of the box can
  open ``/proc/1/fd/0`` or ``/proc/1/fd/1``. bwrap's init closes every other descriptor, so the
  channel is held by the program alone; a program that forks untrusted code closes it in the
  child and makes itself non-dumpable (tasks/harness.py does both).

A program that hangs, crashes, runs out of memory or exits non-zero is a failure; nothing the
program does can hang, crash or signal the caller.

Deliberately left out: cgroup memory/pid accounting (rlimits per box are what every kernel gives
an unprivileged caller; the pid count is per box, the memory cap per process), and a VM-grade
boundary (a kernel exploit escapes any namespace sandbox; docs/GATE.md says what each layer stops).
"""

from __future__ import annotations

import atexit
import json
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tasks import seccomp

BWRAP = "bwrap"
BOX_UID = 65534
"""uid and gid of the sandboxed program (``nobody``), inside and outside the box."""

SHM_MB = 4
"""Size of the box's ``/dev/shm`` (POSIX semaphores and shared memory); the rest of /dev is
read-only."""
STDOUT_KEEP = 64 * 1024
STDERR_KEEP = 2000
_KILL_GRACE_S = 5.0
"""After the kill: how long to wait for the namespace to empty and the pipes to close."""

Status = Literal["passed", "failed", "timeout", "crashed"]


class SandboxUnavailable(RuntimeError):
    """A layer of the sandbox does not hold on this machine; the message names it."""


@dataclass(frozen=True)
class SandboxResult:
    """How a sandboxed program ended. ``passed`` iff it exited 0 within the limits."""

    status: Status
    returncode: int | None
    seconds: float
    stdout: str
    stderr: str
    isolated_network: bool
    channel: str = ""
    """What the program wrote on its private output descriptor (the last 64 KiB), unscrubbed:
    only the program's own code can write there."""

    @property
    def passed(self) -> bool:
        return self.status == "passed"


# -- scrubbing -----------------------------------------------------------------------------------

REDACTED = "[redacted]"
_KEY_PATTERNS = [  # each bounded or anchored, so a long line costs linear time
    re.compile(r"-----BEGIN [A-Z0-9 ]{0,40}(?:PRIVATE KEY|CERTIFICATE|KEY BLOCK)-----.*?"
               r"(?:-----END [A-Z0-9 ]{0,40}-----|\Z)", re.S),
    re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_\-]{16,}"),  # sk-..., sk-proj-...
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),  # AWS access key ids
    re.compile(r"\b(?:ghp|gho|ghs|ghu|github_pat|xox[abpr]|hf)_[A-Za-z0-9_]{16,}"),
    re.compile(r"(?i)\b([A-Z0-9_]{0,64}(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)"
               r"(?:S|_[A-Z0-9_]{0,60})?[\"']?\s{0,4}[:=]\s{0,4}[\"']?)[A-Za-z0-9+/=_\-.]{8,}"),
]


_PLAIN_KEYS = {"PATH", "PWD", "OLDPWD", "HOME", "SHELL", "USER", "LOGNAME", "LANG", "TERM",
               "PYTHONPATH", "VIRTUAL_ENV", "TMPDIR", "HOSTNAME", "LD_LIBRARY_PATH"}


def _plain_setting(key: str, value: str) -> bool:
    """Settings that are not secrets and show up in ordinary output: search paths, the locale,
    and values that name an existing file or folder."""
    return (key in _PLAIN_KEYS or key.startswith("LC_")
            or (value.startswith("/") and "\n" not in value and os.path.exists(value)))


def scrub(text: str, environ: dict[str, str] | None = None) -> str:
    """``text`` with every value of ``environ`` (the caller's environment by default) of 8 or more
    characters (but search paths, locale settings and existing paths), and anything that looks
    like key material (PEM blocks, ``sk-...`` / ``AKIA...`` / ``ghp_...`` tokens, the value of a
    ``...KEY=`` / ``TOKEN=`` / ``SECRET=`` assignment), replaced by ``[redacted]``."""
    env = os.environ if environ is None else environ
    values = {v for k, v in env.items() if len(v) >= 8 and not _plain_setting(k, v)}
    for value in sorted(values, key=len, reverse=True):
        text = text.replace(value, REDACTED)
    for i, pattern in enumerate(_KEY_PATTERNS):
        text = pattern.sub((lambda m: m.group(1) + REDACTED) if i == len(_KEY_PATTERNS) - 1
                           else REDACTED, text)
    return text


# -- the interpreter image -----------------------------------------------------------------------

_SKIP_STDLIB = {"site-packages", "dist-packages", "test", "idlelib", "tkinter", "turtledemo",
                "ensurepip", "lib2to3"}


@dataclass(frozen=True)
class _Interpreter:
    prefix: str
    """Where the interpreter lives, on the host and in the box (its RUNPATH is absolute)."""
    executable: str
    """The interpreter binary, under ``prefix``."""
    source: str
    """What is bound read-only on ``prefix``: the image, or the installation itself."""


_INTERPRETER: _Interpreter | None = None
_LOCK = threading.Lock()


def _interpreter() -> _Interpreter:
    """The interpreter the box runs (this one). A caller that is not root binds its installation
    in place (bwrap runs as the caller). For root it is staged once per process, since bwrap then
    runs as uid 65534, which cannot read a prefix under /root: a tree of hard links (copies across
    file systems) of the binary, its shared library and the standard library (without
    site-packages and the test suites), in a fresh root-owned temporary folder removed at exit.
    The box binds it read-only."""
    global _INTERPRETER
    with _LOCK:
        if _INTERPRETER is not None:
            return _INTERPRETER
        prefix = Path(sys.base_prefix).resolve()
        executable = Path(os.path.realpath(sys.executable))
        if executable.parent.parent != prefix:  # a venv's python links to the base one
            executable = prefix / "bin" / executable.name
        if not executable.is_file():
            raise SandboxUnavailable(f"interpreter: no {executable} under {prefix}")
        if os.geteuid() != 0:  # bwrap runs as the caller, who can read its own interpreter
            _INTERPRETER = _Interpreter(str(prefix), str(executable), str(prefix))
            return _INTERPRETER
        stdlib = Path(sysconfig.get_paths()["stdlib"]).resolve()
        image = Path(tempfile.mkdtemp(prefix="sandbox-python-"))
        atexit.register(shutil.rmtree, image, ignore_errors=True)
        _stage(prefix, executable, stdlib, image)
        _INTERPRETER = _Interpreter(str(prefix), str(executable), str(image))
        return _INTERPRETER


def _link(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _stage(prefix: Path, executable: Path, stdlib: Path, image: Path) -> None:
    _link(executable, image / executable.relative_to(prefix))
    libdir = Path(sysconfig.get_config_var("LIBDIR") or prefix / "lib").resolve()
    for lib in libdir.glob("libpython*.so*") if libdir.is_relative_to(prefix) else ():
        _link(lib.resolve(), image / lib.relative_to(prefix))
    for root, dirs, files in os.walk(stdlib):
        here = Path(root)
        if here == stdlib:
            dirs[:] = [d for d in dirs if d not in _SKIP_STDLIB and not d.startswith("config-")]
        dest = image / here.relative_to(prefix)
        dest.mkdir(parents=True, exist_ok=True)
        for name in files:
            if (here / name).is_file():
                _link(here / name, dest / name)
    for root, dirs, _ in os.walk(image):
        for d in dirs:
            os.chmod(Path(root) / d, 0o755)
    os.chmod(image, 0o755)


# -- the box -------------------------------------------------------------------------------------

# Runs first in the box: sets the limits, then execs the program (no trace of it remains).
_LAUNCHER = """
import os, resource, sys
mem, cpu, fsize, nproc = (int(a) for a in sys.argv[1:5])
for what, n in ((resource.RLIMIT_AS, mem), (resource.RLIMIT_CPU, cpu),
                (resource.RLIMIT_FSIZE, fsize), (resource.RLIMIT_CORE, 0),
                (resource.RLIMIT_NPROC, nproc)):
    resource.setrlimit(what, (n, n))
os.execv(sys.executable, [sys.executable, "-I", "-S", *sys.argv[5:]])
"""


def _lib_binds() -> list[str]:
    """Read-only binds of the shared-library folders, and the ``/lib*`` links a merged /usr has."""
    args: list[str] = []
    for d in ("/usr/lib", "/usr/lib64", "/usr/lib32", "/usr/libx32"):
        if os.path.isdir(d) and not os.path.islink(d):
            args += ["--ro-bind", d, d]
    for d in ("/lib", "/lib64", "/lib32", "/libx32"):
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    return args


def _bwrap_argv(interp: _Interpreter, scratch: str, *, seccomp_fd: int, status_fd: int,
                program_fd: int, scratch_mb: int) -> list[str]:
    path = shutil.which(BWRAP)
    if path is None:
        raise SandboxUnavailable(
            "bubblewrap: `bwrap` is not installed (apt-get install bubblewrap; `make test` "
            "installs it when run as root)")
    return [
        path, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
        "--new-session",
        "--cap-drop", "ALL", "--uid", str(BOX_UID), "--gid", str(BOX_UID),
        "--ro-bind", interp.source, interp.prefix, *_lib_binds(),
        "--proc", "/proc", "--dev", "/dev", "--size", str(SHM_MB * 2**20), "--tmpfs", "/dev/shm",
        "--remount-ro", "/dev",
        "--size", str(scratch_mb * 2**20), "--perms", "0700", "--tmpfs", scratch,
        "--perms", "0500", "--file", str(program_fd), f"{scratch}/program.py",
        "--remount-ro", "/",
        "--clearenv", "--setenv", "PATH", f"{interp.prefix}/bin", "--setenv", "HOME", scratch,
        "--setenv", "TMPDIR", scratch, "--chdir", scratch,
        "--seccomp", str(seccomp_fd), "--json-status-fd", str(status_fd),
        "--", interp.executable, "-I", "-S", "-c", _LAUNCHER,
    ]


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name)  # close-on-exec: only bwrap gets it, through pass_fds
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


class _Tail:
    """The last ``keep`` bytes of a stream."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.data = bytearray()

    def add(self, chunk: bytes) -> None:
        self.data += chunk
        if len(self.data) > 2 * self.keep:
            del self.data[: len(self.data) - self.keep]

    def bytes(self) -> bytes:
        return bytes(self.data[-self.keep:])


@dataclass
class _Run:
    exit_code: int | None  # the program's (bwrap's json status), None if it never ran
    child_pid: int | None  # the box's pid 1, as the host sees it
    timed_out: bool
    stdout: bytes
    stderr: bytes
    bwrap_rc: int | None
    channel: bytes = b""


class _Writer:
    """Bytes still to be written to a non-blocking pipe (the program's stdin or its channel)."""

    def __init__(self, f, data: bytes) -> None:
        self.f = f
        self.pending = memoryview(data)

    def write(self) -> bool:
        """Write what the pipe takes now; True once all is written or the reader has gone."""
        try:
            self.pending = self.pending[os.write(self.f.fileno(), self.pending[:65536]):]
        except BlockingIOError:
            pass
        except BrokenPipeError:  # it stopped reading: the rest is dropped
            self.pending = self.pending[:0]
        return not self.pending


def _box(argv: list[str], fds: tuple[int, ...], status_r: int, stdin: bytes | None,
         timeout_s: float, channel: tuple[int, int, bytes] | None = None) -> _Run:
    """Start bwrap and see it through. Owns ``fds`` (closed once bwrap has them), ``status_r``
    and the caller's ends of the ``channel`` (write end, read end, bytes to write)."""
    chan_w = os.fdopen(channel[0], "wb", buffering=0) if channel else None
    chan_r = os.fdopen(channel[1], "rb", buffering=0) if channel else None
    root = os.geteuid() == 0
    held = _HeldSignals()
    try:
        proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={}, pass_fds=fds,
            start_new_session=True, close_fds=True,
            **({"user": BOX_UID, "group": BOX_UID, "extra_groups": []} if root else {}),
        )
    except BaseException:
        os.close(status_r)
        for f in (chan_w, chan_r):
            _close(f)
        held.release()
        raise
    finally:
        for fd in fds:
            os.close(fd)
    sel: selectors.BaseSelector | None = None
    killed_at: float | None = None
    timed_out = False
    pidfd: int | None = None
    try:
        held.release()  # a stop that came while bwrap started unwinds here, where it is killed
        out, err, status = _Tail(STDOUT_KEEP), _Tail(8 * STDERR_KEEP), bytearray()
        private = _Tail(STDOUT_KEEP)
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ, out)
        sel.register(proc.stderr, selectors.EVENT_READ, err)
        sel.register(status_r, selectors.EVENT_READ, status)
        if chan_r is not None:
            sel.register(chan_r, selectors.EVENT_READ, private)
        for f, data in ((proc.stdin, stdin), (chan_w, channel[2] if channel else None)):
            if f is None:
                continue
            os.set_blocking(f.fileno(), False)
            if data:
                sel.register(f, selectors.EVENT_WRITE, _Writer(f, data))
            else:
                _close(f)
        deadline = time.monotonic() + timeout_s
        while sel.get_map():
            now = time.monotonic()
            if killed_at is None and now >= deadline:
                timed_out = True
                killed_at = _kill(proc, pidfd)
            if killed_at is not None and now >= killed_at + _KILL_GRACE_S:
                break
            limit = (killed_at + _KILL_GRACE_S if killed_at is not None else deadline) - now
            for key, _ in sel.select(timeout=max(0.0, limit)):
                if isinstance(key.data, _Writer):  # the program's stdin or channel
                    if key.data.write():
                        sel.unregister(key.fileobj)
                        _close(key.fileobj)
                    continue
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                if key.data is status:
                    status += chunk[: 4096 - len(status)]
                    if pidfd is None:
                        pidfd = _open_box_pid(status)
                    if b"exit-code" in status and killed_at is None:
                        killed_at = _kill(proc, pidfd)  # the program is done: end its box
                else:
                    key.data.add(chunk)
    finally:
        if sel is not None:
            sel.close()
        if killed_at is None:
            _kill(proc, pidfd)
        for f in (proc.stdin, proc.stdout, proc.stderr, chan_w, chan_r):
            _close(f)
        os.close(status_r)
        try:
            proc.wait(timeout=_KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
        if pidfd is not None:  # pid 1 exits only once every other process of the box is gone
            _wait_readable(pidfd, _KILL_GRACE_S)
            os.close(pidfd)
    docs = _status_docs(bytes(status))
    exit_code = next((d["exit-code"] for d in docs if "exit-code" in d), None)
    child_pid = next((d["child-pid"] for d in docs if "child-pid" in d), None)
    return _Run(exit_code, child_pid, timed_out, out.bytes(), err.bytes(), proc.returncode,
                private.bytes() if channel else b"")


class _HeldSignals:
    """Holds the Python handlers of SIGTERM and SIGINT from its making until :meth:`release`,
    which puts them back and runs what came meanwhile: made before ``subprocess.Popen`` starts
    bwrap and released inside the ``try`` whose ``finally`` kills bwrap's group. A stop that
    unwound out of ``Popen`` itself, or before that ``try``, would lose the process: the caller
    could not kill the group, and should the caller then exit while bwrap is between making the
    box's pid 1 and releasing it, that pid 1 waits for bwrap forever (its die-with-parent is not
    yet set). Only the main thread has handlers; elsewhere nothing is held."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self.caught: list[tuple[int, object]] = []
        self.previous: dict[int, object] = {}
        if threading.current_thread() is threading.main_thread():
            for signum in self.SIGNALS:
                if callable(signal.getsignal(signum)):
                    self.previous[signum] = signal.signal(
                        signum, lambda n, frame: self.caught.append((n, frame)))

    def release(self) -> None:
        previous, self.previous = self.previous, {}
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        caught, self.caught = self.caught, []
        for signum, frame in caught:
            previous[signum](signum, frame)


def _close(f) -> None:
    if f is not None and not f.closed:
        try:
            f.close()
        except OSError:  # a broken pipe on flush: nothing is buffered that matters
            pass


def _wait_readable(fd: int, timeout_s: float) -> None:
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        sel.select(timeout=timeout_s)


def _status_docs(raw: bytes) -> list[dict]:
    docs = []
    for line in raw.decode(errors="replace").splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict):
            docs.append(doc)
    return docs


def _open_box_pid(status: bytearray) -> int | None:
    """A pidfd on the box's pid 1, once bwrap has reported it (its first status line)."""
    for doc in _status_docs(bytes(status)):
        pid = doc.get("child-pid")
        if isinstance(pid, int) and pid > 1:
            try:
                return os.pidfd_open(pid)
            except ProcessLookupError:
                return None
    return None


def _kill(proc: subprocess.Popen, pidfd: int | None) -> float:
    """SIGKILL the box's pid 1 (the kernel then kills the whole pid namespace) and bwrap's own
    process group (its --die-with-parent kills pid 1 too, should the pidfd not be open yet)."""
    if pidfd is not None:
        try:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the group this call created, nothing else
    except ProcessLookupError:
        pass
    return time.monotonic()


# -- probing -------------------------------------------------------------------------------------

_PROBE = r"""
import json, os, resource, socket
def ns(name):
    return os.readlink(f"/proc/self/ns/{name}")
status = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines()
              if ":\t" in line)
try:
    import ctypes
    unshare = ctypes.CDLL(None, use_errno=True).unshare(0x10000000) == 0  # CLONE_NEWUSER
except ImportError:
    unshare = None
try:
    socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    inet = True
except OSError:
    inet = False
try:
    open("/probe-write", "w")
    root_rw = True
except OSError:
    root_rw = False
print(json.dumps({
    "ns": {n: ns(n) for n in ("user", "pid", "mnt", "net", "ipc", "uts")},
    "uid": os.getuid(), "gid": os.getgid(), "cap_eff": status["CapEff"].strip(),
    "no_new_privs": status["NoNewPrivs"].strip(), "seccomp": status["Seccomp"].strip(),
    "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    "nproc": resource.getrlimit(resource.RLIMIT_NPROC)[0],
    "unshare": unshare, "inet": inet, "root_rw": root_rw,
    "etc": os.path.exists("/etc/passwd"),
}))
"""

_LAYERS: dict[str, str] | None = None


def sandbox_layers(*, refresh: bool = False) -> dict[str, str]:
    """Each layer of the box and whether it holds here: ``"ok"`` or why not. Probed once per
    process by running a program in a real box (``refresh`` probes again)."""
    global _LAYERS
    if _LAYERS is not None and not refresh:
        return _LAYERS
    layers = {k: "not probed" for k in (
        "bubblewrap", "seccomp", "user namespace", "pid namespace", "mount namespace",
        "network namespace", "ipc namespace", "uts namespace", "uid 65534", "no capabilities",
        "no_new_privs", "read-only root", "pid limit", "interpreter")}
    if shutil.which(BWRAP) is None:
        layers["bubblewrap"] = "bwrap is not installed (apt-get install bubblewrap)"
        _LAYERS = layers
        return layers
    layers["bubblewrap"] = "ok"
    if not seccomp.supported():
        layers["seccomp"] = f"no syscall table for {os.uname().machine}"
        _LAYERS = layers
        return layers
    try:
        r = _run_box(_PROBE, timeout_s=30, memory_mb=256, cpu_s=20, file_mb=1, scratch_mb=4,
                     max_procs=8, scratch_root=None, stdin=None)
    except SandboxUnavailable as e:
        layers["interpreter"] = str(e)
        _LAYERS = layers
        return layers
    try:
        got = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        reason = f"the probe did not run in the box ({r.status}): {r.stderr.strip()[-300:]}"
        layers = {k: (v if k == "bubblewrap" else reason) for k, v in layers.items()}
        _LAYERS = layers
        return layers
    layers["interpreter"] = "ok"
    host = {n: os.readlink(f"/proc/self/ns/{n}") for n in got["ns"]}
    names = {"user": "user", "pid": "pid", "mnt": "mount", "net": "network", "ipc": "ipc",
             "uts": "uts"}
    for n, label in names.items():
        layers[f"{label} namespace"] = "ok" if got["ns"][n] != host[n] else "shared with the host"
    layers["uid 65534"] = "ok" if (got["uid"], got["gid"]) == (BOX_UID, BOX_UID) \
        else f"uid {got['uid']} gid {got['gid']}"
    layers["no capabilities"] = "ok" if int(got["cap_eff"], 16) == 0 \
        else f"CapEff {got['cap_eff']}"
    layers["no_new_privs"] = "ok" if got["no_new_privs"] == "1" else "not set"
    held = got["seccomp"] == "2" and got["unshare"] is False and not got["inet"]
    layers["seccomp"] = "ok" if held \
        else f"Seccomp {got['seccomp']}, unshare allowed {got['unshare']}, inet {got['inet']}"
    if got["pids"] != [1, 2] and layers["pid namespace"] == "ok":
        layers["pid namespace"] = f"other processes visible: {got['pids'][:10]}"
    layers["read-only root"] = "ok" if not got["root_rw"] and not got["etc"] \
        else f"root writable {got['root_rw']}, host /etc visible {got['etc']}"
    layers["pid limit"] = "ok" if got["nproc"] == 8 else f"RLIMIT_NPROC {got['nproc']}"
    _LAYERS = layers
    return layers


def _require_layers() -> None:
    missing = {k: v for k, v in sandbox_layers().items() if v != "ok"}
    if missing:
        raise SandboxUnavailable(
            "the sandbox cannot hold on this machine, refusing to run untrusted code: "
            + "; ".join(f"{k}: {v}" for k, v in missing.items()))


# -- running -------------------------------------------------------------------------------------

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
    scratch_mb: int = 32,
    max_procs: int = 32,
    channel: bytes | None = None,
) -> SandboxResult:
    """Run ``code`` as a Python program in the box and report how it ended.

    ``stdin``: bytes written to the program's standard input, which is then closed (``None``:
    an empty input). ``scratch_root``: where the scratch folder's name is made (its contents live
    in the box's own tmpfs of ``scratch_mb``; the folder is removed afterwards). ``max_procs``:
    processes and threads the program may have at once (itself included). ``channel``: open the
    private channel (module docstring) and write these bytes into it; the program gets the
    numbers of its in and out descriptors as ``sys.argv[1]`` and ``sys.argv[2]``, and what it
    writes out comes back as :attr:`SandboxResult.channel`.
    Raises :class:`SandboxUnavailable` when a layer of the box does not hold here."""
    if timeout_s <= 0 or memory_mb < 32:
        raise ValueError(f"need timeout_s > 0 and memory_mb >= 32, got {timeout_s}, {memory_mb}")
    if max_procs < 4 or scratch_mb < 1 or file_mb < 1:
        raise ValueError(f"need max_procs >= 4, scratch_mb >= 1 and file_mb >= 1, got "
                         f"{max_procs}, {scratch_mb}, {file_mb}")
    _require_layers()
    return _run_box(code, timeout_s=timeout_s, memory_mb=memory_mb, cpu_s=cpu_s,
                    file_mb=file_mb, scratch_mb=scratch_mb, max_procs=max_procs,
                    scratch_root=scratch_root, stdin=stdin, channel=channel)


def _run_box(code: str, *, timeout_s: float, memory_mb: int, cpu_s: int | None, file_mb: int,
             scratch_mb: int, max_procs: int, scratch_root: Path | None,
             stdin: bytes | None, channel: bytes | None = None) -> SandboxResult:
    interp = _interpreter()
    cpu = cpu_s if cpu_s is not None else max(1, int(timeout_s) + 1)
    scratch = tempfile.mkdtemp(prefix="sandbox-", dir=scratch_root)
    start = time.perf_counter()
    fds: list[int] = []
    host_ends: list[int] = []
    try:
        fds.append(_memfd("seccomp", seccomp.filter_program()))
        fds.append(_memfd("program", code.encode("utf-8", errors="surrogatepass")))
        argv = _bwrap_argv(interp, scratch, seccomp_fd=fds[0], status_fd=-1,
                           program_fd=fds[1], scratch_mb=scratch_mb)
        status_r, status_w = os.pipe()
        fds.append(status_w)
        argv[argv.index("--json-status-fd") + 1] = str(status_w)
        argv += [str(memory_mb * 2**20), str(cpu), str(file_mb * 2**20), str(max_procs),
                 f"{scratch}/program.py"]
        private = None
        if channel is not None:  # the box's ends go to bwrap; the caller keeps the others
            in_r, in_w = os.pipe()
            host_ends.append(in_w)
            fds.append(in_r)
            out_r, out_w = os.pipe()
            host_ends.append(out_r)
            fds.append(out_w)
            argv += [str(in_r), str(out_w)]
            private = (in_w, out_r, channel)
        owned, fds, host_ends = tuple(fds), [], []
        run = _box(argv, owned, status_r, stdin, timeout_s, private)
    finally:
        for fd in fds + host_ends:
            os.close(fd)
        shutil.rmtree(scratch, ignore_errors=True)
    if run.exit_code is None and not run.timed_out:
        raise SandboxUnavailable(
            f"bubblewrap could not set up the box (exit {run.bwrap_rc}): "
            f"{scrub(run.stderr.decode(errors='replace'))[-STDERR_KEEP:]}")
    if run.timed_out:
        status, returncode = "timeout", None
    else:
        returncode = -(run.exit_code - 128) if run.exit_code > 128 else run.exit_code
        status = _status(returncode)
    return SandboxResult(
        status=status, returncode=returncode, seconds=time.perf_counter() - start,
        stdout=scrub(run.stdout.decode(errors="replace")),
        stderr=scrub(run.stderr.decode(errors="replace"))[-STDERR_KEEP:],
        isolated_network=True, channel=run.channel.decode(errors="replace"),
    )


def network_namespace_available() -> bool:
    """Whether the box gets its own network namespace here (it always does where it runs)."""
    return sandbox_layers().get("network namespace") == "ok"


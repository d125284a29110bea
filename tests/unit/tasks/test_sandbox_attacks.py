"""Attacks a policy under reward pressure (or a hostile suite) would try on the grader's sandbox.

Each test runs the attack as the program a grade runs and asserts the box refused it. Processes
are told apart by a marker in their command line (the test's own scratch folder), so a test can
count what survives a grade without looking at anyone else's processes; leftovers are killed by
pid after each test (they exist only if the sandbox failed).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

from tasks import sandbox
from tasks.sandbox import run_sandboxed

ROOT = Path(__file__).resolve().parents[3]


def _marked(marker: str, *, programs_only: bool = False) -> list[int]:
    """Host pids whose command line contains ``marker`` (``programs_only``: not bwrap's own two
    processes, the launcher outside and the box's pid 1)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline and not (
                    programs_only and Path(cmdline.split(b"\0")[0].decode()).name == "bwrap"):
                pids.append(int(entry))
    return pids


@pytest.fixture
def marker(tmp_path):
    """The test's scratch root: every box process's command line names it (program.py lives
    under it); killed by pid afterwards should the sandbox have let any survive."""
    yield str(tmp_path)
    for pid in _marked(str(tmp_path)):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _require_pid_namespace() -> None:
    """Attacks that would hit the host's processes if the box had no pid namespace run only
    once the sandbox says it has one."""
    layers = getattr(sandbox, "sandbox_layers", None)
    if layers is None or layers().get("pid namespace") != "ok":
        pytest.fail("the sandbox has no pid namespace: not running a host-wide attack")


def _grade_in_child(code: str, *, timeout_s: float, scratch_root: str, hard_s: float
                    ) -> tuple[float, dict | None, int]:
    """Run ``run_sandboxed`` in a child interpreter (so an attack on the caller, or a grade that
    never returns, fails the test instead of killing or hanging it): (seconds, result, rc)."""
    driver = textwrap.dedent(f"""
        import dataclasses, json, sys
        from pathlib import Path
        from tasks.sandbox import run_sandboxed
        r = run_sandboxed(sys.stdin.read(), timeout_s={timeout_s},
                          scratch_root=Path({scratch_root!r}))
        print(json.dumps(dataclasses.asdict(r)))
    """)
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", driver], cwd=ROOT, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, start_new_session=True)
    try:
        out, _ = proc.communicate(code, timeout=hard_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return time.monotonic() - start, None, proc.returncode
    lines = out.strip().splitlines()
    return time.monotonic() - start, json.loads(lines[-1]) if lines else None, proc.returncode


@pytest.fixture
def listener():
    """A TCP listener on 127.0.0.1 in the caller's network namespace (a stand-in for MLflow)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    s.setblocking(False)
    yield s
    s.close()


def _accepted(s: socket.socket) -> bool:
    try:
        conn, _ = s.accept()
    except BlockingIOError:
        return False
    conn.close()
    return True


# -- the network -----------------------------------------------------------------------------------

def test_setns_back_into_the_callers_network_namespace_is_refused(listener, marker):
    port = listener.getsockname()[1]
    code = textwrap.dedent(f"""
        import ctypes, os, _socket
        libc = ctypes.CDLL(None, use_errno=True)
        for pid in (os.getppid(), 1, {os.getpid()}):
            try:
                fd = os.open(f"/proc/{{pid}}/ns/net", os.O_RDONLY)
            except OSError as e:
                print("open", pid, e)
                continue
            print("setns", pid, libc.setns(fd, 0x40000000), ctypes.get_errno())
            try:
                s = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
                s.settimeout(2)
                s.connect(("127.0.0.1", {port}))
                print("CONNECTED via", pid)
            except OSError as e:
                print("connect", pid, e)
    """)
    r = run_sandboxed(code, timeout_s=10, scratch_root=Path(marker))
    assert "CONNECTED" not in r.stdout, r.stdout
    assert not _accepted(listener)


def test_the_raw_socket_module_cannot_reach_loopback(listener, marker):
    port = listener.getsockname()[1]
    code = (f"import _socket\ns = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)\n"
            f"s.settimeout(2)\ns.connect(('127.0.0.1', {port}))\nprint('CONNECTED')\n")
    r = run_sandboxed(code, timeout_s=10, scratch_root=Path(marker))
    assert not r.passed and "CONNECTED" not in r.stdout
    assert not _accepted(listener)


# -- the caller and the host's processes ---------------------------------------------------------

def test_killing_the_parent_does_not_kill_the_caller(marker):
    code = ("import os, signal, time\nos.kill(os.getppid(), signal.SIGKILL)\n"
            "time.sleep(0.5)\nprint('still here')\n")
    seconds, result, rc = _grade_in_child(code, timeout_s=5, scratch_root=marker, hard_s=60)
    assert rc == 0 and result is not None, f"the caller died (rc {rc})"
    assert result["status"] == "passed" and "still here" in result["stdout"]


def test_signalling_every_process_reaches_only_the_box(marker):
    _require_pid_namespace()
    code = "import os, signal\nos.kill(-1, signal.SIGKILL)\n"
    seconds, result, rc = _grade_in_child(code, timeout_s=5, scratch_root=marker, hard_s=60)
    assert rc == 0 and result is not None, f"the caller died (rc {rc})"


def test_the_box_sees_only_its_own_processes(marker):
    code = "import os\nprint(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\n"
    r = run_sandboxed(code, timeout_s=10, scratch_root=Path(marker))
    assert r.passed and json.loads(r.stdout) == [1, 2]


# -- time and leftovers --------------------------------------------------------------------------

SLEEPER = ("import os, subprocess, sys\n"
           "def sleeper(seconds):\n"
           "    # setsid, its own stdio on /dev/null, the test's marker in its command line\n"
           "    return subprocess.Popen([sys.executable, '-c',\n"
           "                             f'import time; time.sleep({seconds})', __file__],\n"
           "                            start_new_session=True, close_fds=True,\n"
           "                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,\n"
           "                            stderr=subprocess.DEVNULL)\n")


def test_a_setsid_child_holding_the_pipes_does_not_hold_the_grade(marker):
    code = ("import os, time\n"
            "if os.fork() == 0:\n"
            "    os.setsid()\n"
            "    time.sleep(3600)  # keeps stdout and stderr open\n"
            "print('done')\n")
    seconds, result, _ = _grade_in_child(code, timeout_s=2, scratch_root=marker, hard_s=30)
    assert result is not None and seconds < 2 + 8, f"the grade took {seconds:.1f} s"
    assert result["status"] == "passed"
    assert _marked(marker) == []


def test_a_hanging_program_with_a_setsid_child_times_out_on_time(marker):
    code = ("import os, time\n"
            "if os.fork() == 0:\n"
            "    os.setsid()\n"
            "time.sleep(3600)\n")
    seconds, result, _ = _grade_in_child(code, timeout_s=1, scratch_root=marker, hard_s=30)
    assert result is not None and seconds < 1 + 8, f"the grade took {seconds:.1f} s"
    assert result["status"] == "timeout"
    assert _marked(marker) == []


def test_a_setsid_sleeper_does_not_survive_a_passing_grade(marker):
    code = SLEEPER + "p = sleeper(60)\nprint('sleeper', p.pid)\n"
    r = run_sandboxed(code, timeout_s=10, scratch_root=Path(marker))
    assert r.passed, r.stderr
    assert _marked(marker) == []


def test_a_double_fork_does_not_survive(marker):
    code = ("import os, time\n"
            "if os.fork() == 0:\n"
            "    os.setsid()\n"
            "    if os.fork() == 0:\n"
            "        os.closerange(0, 3)\n"
            "        time.sleep(60)\n"
            "    os._exit(0)\n"
            "time.sleep(0.2)\n")
    r = run_sandboxed(code, timeout_s=10, scratch_root=Path(marker))
    assert r.passed, r.stderr
    assert _marked(marker) == []


def test_a_pid_exhaustion_loop_is_capped_and_leaves_nothing(marker):
    code = textwrap.dedent("""
        import os, time
        n = 0
        for _ in range(200):
            try:
                pid = os.fork()
            except OSError:
                break
            if pid == 0:
                os.setsid()
                os.closerange(0, 3)
                time.sleep(60)
                os._exit(0)
            n += 1
        print(n)
    """)
    r = run_sandboxed(code, timeout_s=20, scratch_root=Path(marker))
    assert r.status in ("passed", "failed"), r
    assert int(r.stdout.split()[-1]) < 32, r.stdout
    assert _marked(marker) == []
    assert run_sandboxed("print('next')", timeout_s=10).passed


def test_a_fork_bomb_stays_in_its_box(marker):
    _require_pid_namespace()
    code = ("import os\n"
            "while True:\n"
            "    try:\n"
            "        os.fork()\n"
            "    except OSError:\n"
            "        pass\n")
    seen = [0]
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            seen[0] = max(seen[0], len(_marked(marker, programs_only=True)))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        r = run_sandboxed(code, timeout_s=2.0, scratch_root=Path(marker))
    finally:
        done.set()
        watcher.join()
    assert r.status == "timeout"
    assert 0 < seen[0] <= 32, f"{seen[0]} processes at once"
    assert _marked(marker) == []
    assert run_sandboxed("import os\nassert os.fork() >= 0\n", timeout_s=10).passed


# -- files ---------------------------------------------------------------------------------------

def test_files_outside_the_scratch_folder_cannot_be_read(tmp_path, monkeypatch, marker):
    secret = "s3cret-" + uuid.uuid4().hex
    monkeypatch.setenv("RATCHET_TEST_SECRET", secret)
    (tmp_path / "mlflow.db").write_text(f"db {secret}")
    (tmp_path / "keys.json").write_text(json.dumps({"key": secret}))
    targets = ["/etc/shadow", "/etc/passwd", str(ROOT / "pyproject.toml"),
               str(tmp_path / "mlflow.db"), str(tmp_path / "keys.json")]
    code = textwrap.dedent(f"""
        import json, os
        environs = [f"/proc/{{p}}/environ" for p in os.listdir("/proc") if p.isdigit()]
        environs += ["/proc/%d/environ" % os.getppid(), "/proc/{os.getpid()}/environ"]
        read, leaks = [], []
        for path in {targets!r} + environs:
            try:
                data = open(path, "rb").read()
            except OSError as e:
                continue
            if not path.endswith("/environ"):
                read.append(path)
            for line in data.replace(b"\\0", b"\\n").splitlines():
                if b"RATCHET_TEST_SECRET=" in line or b"s3cret-" in line:
                    leaks.append(line.hex())  # encoded, as an attacker would, past any scrub
        print(json.dumps({{"read": read, "leaks": leaks[:3]}}))
    """)
    r = run_sandboxed(code, timeout_s=10, scratch_root=Path(marker))
    assert r.passed, r.stderr
    got = json.loads(r.stdout.splitlines()[-1])
    assert not set(got["read"]) & set(targets), got["read"]
    assert got["leaks"] == [] and secret.encode().hex() not in r.stdout


def test_nothing_outside_the_scratch_folder_can_be_written(tmp_path, marker):
    name = f"sandbox-attack-{uuid.uuid4().hex}"
    targets = [ROOT / name, Path("/tmp") / name, tmp_path / name, Path("/") / name]
    code = textwrap.dedent(f"""
        for path in {[str(t) for t in targets]!r}:
            try:
                with open(path, "w") as f:
                    f.write("x")
                print("WROTE", path)
            except OSError:
                pass
    """)
    try:
        r = run_sandboxed(code, timeout_s=10, scratch_root=Path(marker))
        assert r.passed and "WROTE" not in r.stdout, r.stdout
        assert not any(t.exists() for t in targets)
    finally:
        for t in targets:
            if t.exists():
                t.unlink()


def test_writable_space_is_capped(marker):
    """48 MiB in files of 8 MiB, into the scratch folder, /dev and /dev/shm: at most the scratch
    cap (32 MiB) plus /dev/shm's (4 MiB) lands."""
    code = textwrap.dedent("""
        import os
        total = 0
        chunk = b"x" * (8 << 20)
        for folder in (".", "/dev", "/dev/shm"):
            written = []
            try:
                for i in range(6):
                    path = f"{folder}/sandbox-cap-{i}"
                    written.append(path)
                    with open(path, "wb") as f:
                        f.write(chunk)
                    total += len(chunk)
            except OSError as e:
                print(folder, "stopped:", e)
            for path in written:  # counted, then removed
                try:
                    os.unlink(path)
                except OSError:
                    pass
        print(total)
    """)
    r = run_sandboxed(code, timeout_s=20, scratch_root=Path(marker))
    assert int(r.stdout.split()[-1]) <= (32 + 4) << 20, r.stdout


# -- who the program is --------------------------------------------------------------------------

def test_the_program_is_nobody_without_capabilities_under_seccomp(marker):
    code = SLEEPER + textwrap.dedent("""
        import ctypes, os
        status = dict(l.split(":\\t", 1) for l in open("/proc/self/status").read().splitlines()
                      if ":\\t" in l)
        libc = ctypes.CDLL(None, use_errno=True)
        print("uid", os.getuid(), os.getgid())
        print("caps", status["CapEff"].strip(), status["NoNewPrivs"].strip(),
              status["Seccomp"].strip())
        for name, call in (("unshare", lambda: libc.unshare(0x10000000)),
                           ("mount", lambda: libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)),
                           ("ptrace", lambda: libc.ptrace(0, 0, None, None)),
                           ("chroot", lambda: libc.chroot(b"/"))):
            print(name, call(), ctypes.get_errno())
        p = sleeper(30)
        import time; time.sleep(0.5)
    """)
    host: list[str] = []

    def find_sleeper() -> None:
        for _ in range(100):
            for pid in _marked(marker):
                st = Path(f"/proc/{pid}/status").read_text()
                if "time.sleep" in Path(f"/proc/{pid}/cmdline").read_text():
                    host.append(next(x for x in st.splitlines() if x.startswith("Uid:")))
                    return
            time.sleep(0.05)

    t = threading.Thread(target=find_sleeper)
    t.start()
    r = run_sandboxed(code, timeout_s=10, scratch_root=Path(marker))
    t.join()
    lines = dict(line.split(" ", 1) for line in r.stdout.splitlines())
    assert lines["uid"] == "65534 65534"
    assert lines["caps"] == "0000000000000000 1 2"
    for name in ("unshare", "mount", "ptrace", "chroot"):
        assert lines[name] == "-1 1", (name, lines[name])  # EPERM
    if os.geteuid() == 0:  # bwrap runs as nobody too: the box is nobody on the host as well
        assert host and host[0].split()[1:] == ["65534"] * 4, host


def test_no_descriptor_of_the_caller_leaks_into_the_box(marker):
    r = run_sandboxed("import os\nprint(sorted(os.listdir('/proc/self/fd')))\n", timeout_s=10,
                      scratch_root=Path(marker))
    assert r.passed and r.stdout.strip() == "['0', '1', '2', '3']"  # 3: the listing itself


# -- input and output ----------------------------------------------------------------------------

def test_stdin_goes_in_and_stdout_keeps_its_last_64_kib():
    code = ("import sys\ndata = sys.stdin.buffer.read()\nsys.stdout.write('x' * 200_000)\n"
            "print()\nprint('got', len(data), data[-8:].decode())\n")
    r = run_sandboxed(code, timeout_s=10, stdin=b"a" * 300_000 + b"nonce-42")
    assert r.passed, r.stderr
    assert r.stdout.endswith("got 300008 nonce-42\n")
    assert 64 * 1024 <= len(r.stdout) <= 128 * 1024


def test_a_flooding_program_is_stopped_on_time_with_a_bounded_tail():
    start = time.monotonic()
    r = run_sandboxed("import sys\nwhile True:\n    sys.stdout.write('y' * 4096)\n",
                      timeout_s=1.0)
    assert r.status == "timeout" and time.monotonic() - start < 1.0 + 3.0
    assert len(r.stdout) <= 128 * 1024


# -- refusing to run unboxed ---------------------------------------------------------------------

def test_a_missing_layer_refuses_to_run(monkeypatch):
    monkeypatch.setattr(sandbox, "BWRAP", "bwrap-that-is-not-installed")
    monkeypatch.setattr(sandbox, "_LAYERS", None)
    assert "not installed" in sandbox.sandbox_layers()["bubblewrap"]
    with pytest.raises(sandbox.SandboxUnavailable, match="bubblewrap"):
        run_sandboxed("print('unboxed')", timeout_s=5)
    monkeypatch.setattr(sandbox, "_LAYERS", None)


def test_the_seccomp_program_refuses_namespaces_foreign_abis_and_inet_sockets(marker):
    if os.uname().machine != "x86_64":
        pytest.skip("the system call numbers below are x86-64's")
    code = textwrap.dedent("""
        import ctypes, os, socket
        libc = ctypes.CDLL(None, use_errno=True)
        def call(*args):
            ctypes.set_errno(0)
            return libc.syscall(*[ctypes.c_long(a) for a in args]), ctypes.get_errno()
        print("clone_newnet", *call(56, 0x40000000 | 17, 0, 0, 0, 0))  # clone(CLONE_NEWNET|SIGCHLD)
        print("clone3", *call(435, 0, 0))
        print("x32_getpid", *call(0x40000000 + 39))
        print("setns", *call(308, 0, 0))
        for family in (socket.AF_INET, socket.AF_INET6, socket.AF_NETLINK, socket.AF_PACKET):
            try:
                socket.socket(family, socket.SOCK_DGRAM).close()
                print("socket", int(family), "allowed")
            except OSError as e:
                print("socket", int(family), e.errno)
        a, b = socket.socketpair()
        print("unix ok")
    """)
    r = run_sandboxed(code, timeout_s=10, scratch_root=Path(marker))
    assert r.passed, r.stderr
    lines = r.stdout.splitlines()
    assert "clone_newnet -1 1" in lines and "clone3 -1 38" in lines  # EPERM, ENOSYS
    assert "x32_getpid -1 1" in lines and "setns -1 1" in lines
    assert [ln for ln in lines if ln.startswith("socket")] == [
        "socket 2 1", "socket 10 1", "socket 16 1", "socket 17 1"]
    assert "unix ok" in lines

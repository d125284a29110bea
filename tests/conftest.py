"""Shared fixtures: the real local services, started once per test session and only on demand.

``broker`` (Tansu, embedded Kafka) and ``mlflow_server`` are session-scoped and lazy: a unit
test run never starts them. Both are stopped by their own PID at the end of the session.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from trainer.ray_backend import use_loopback_env

use_loopback_env()  # before anything imports ray (see start_local_ray)


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

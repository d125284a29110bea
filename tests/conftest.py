"""Shared fixtures: the real local services, started once per test session and only on demand.

``broker`` (Tansu, embedded Kafka) and ``mlflow_server`` are session-scoped and lazy: a unit
test run never starts them. Both are stopped by their own PID at the end of the session.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from trainer.ray_backend import LOOPBACK_ENV

for _key, _value in LOOPBACK_ENV.items():  # before anything imports ray (see start_local_ray)
    os.environ.setdefault(_key, _value)


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A running broker; use ``broker.bootstrap`` ("127.0.0.1:PORT")."""
    from ratchet.services import Broker

    b = Broker.start(tmp_path_factory.mktemp("broker"))
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A running MLflow tracking server; use ``mlflow_server.uri`` ("http://127.0.0.1:PORT")."""
    from ratchet.services import MlflowServer

    s = MlflowServer.start(tmp_path_factory.mktemp("mlflow"))
    try:
        yield s
    finally:
        s.stop()

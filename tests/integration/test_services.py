"""The local services start on free ports and stop by their own PID."""

from __future__ import annotations

import os
import urllib.request

import pytest

from runtime.services import Broker, MlflowServer, _pid_alive, stop_leftovers

pytestmark = pytest.mark.integration


def test_broker_starts_serves_and_stops_by_pid(tmp_path):
    from ingest.kafka_io import ensure_topics, partitions_of

    with Broker.start(tmp_path) as b:
        assert b.bootstrap.startswith("127.0.0.1:")
        assert (tmp_path / "broker.pid").read_text() == str(b.pid)
        ensure_topics(b.bootstrap, partitions=3, topics=["t.x"])
        assert partitions_of(b.bootstrap, "t.x") == [0, 1, 2]
    assert not _pid_alive(b.pid)
    assert not (tmp_path / "broker.pid").exists()


def test_leftover_is_stopped_by_its_pidfile(tmp_path):
    b = Broker.start(tmp_path)
    try:
        assert stop_leftovers(tmp_path) == [b.pid]
        b.proc.wait(timeout=10)
        assert not _pid_alive(b.pid)
    finally:
        b.stop()


@pytest.mark.slow
def test_mlflow_server_health_and_stop(tmp_path):
    s = MlflowServer.start(tmp_path)
    try:
        with urllib.request.urlopen(f"{s.uri}/health", timeout=5) as r:
            assert r.status == 200
        pgid = os.getpgid(s.pid)
        assert pgid == s.pid  # its own process group, stopped as a whole
    finally:
        s.stop()
    assert not _pid_alive(s.pid)

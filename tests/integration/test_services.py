"""The local services start on free ports and stop by their own PID."""

from __future__ import annotations

import os
import sqlite3
import urllib.request
from pathlib import Path

import pytest

from runtime.registry import runs_page
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
def test_mlflow_server_is_one_process_that_stores_and_stops(tmp_path):
    """The settings runtime/mlflow_server_main.py hands MLflow's app reach it: the experiment
    lands in the workdir's database and the artifact, logged through the server, in its
    artifacts folder. If an MLflow release renames them, this fails."""
    from mlflow import MlflowClient

    s = MlflowServer.start(tmp_path)
    try:
        with urllib.request.urlopen(f"{s.uri}/health", timeout=5) as r:
            assert r.status == 200
        assert os.getpgid(s.pid) == s.pid  # its own process group, stopped as a whole
        assert _children(s.pid) == []  # one process: nothing to outlive a SIGKILL

        client = MlflowClient(tracking_uri=s.uri)
        experiment_id = client.create_experiment("round-trip")
        run = client.create_run(experiment_id)
        (tmp_path / "note.txt").write_text("logged through the server")
        client.log_artifact(run.info.run_id, str(tmp_path / "note.txt"))
        assert run.info.artifact_uri.startswith("mlflow-artifacts:/")
        # the address `ratchet ui` prints, looked up without mlflow's client
        assert runs_page(s.uri, "round-trip") == (
            f"{s.uri}/#/experiments/{experiment_id}?workflowType=machine_learning")
        assert runs_page(s.uri, "no-such-experiment") == s.uri
    finally:
        s.stop()
    assert not _pid_alive(s.pid)

    with sqlite3.connect(tmp_path / "mlflow.db") as db:
        names = {row[0] for row in db.execute("SELECT name FROM experiments")}
    assert "round-trip" in names
    stored = tmp_path / "artifacts" / experiment_id / run.info.run_id / "artifacts" / "note.txt"
    assert stored.read_text() == "logged through the server"


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found

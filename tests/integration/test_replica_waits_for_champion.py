"""A replica started before its tracking server exists and before its champion is registered (as
`ratchet serve` starts them, all at once) stays up and serves the champion once it is registered.
(The cadence of its polls is tests/unit/deploy/test_initial_load.py.)"""

from __future__ import annotations

import time

import pytest

from deploy.fleet.fleet import Fleet
from ratchet.bootstrap import ensure_champion
from ratchet.config import RatchetConfig
from runtime.services import MlflowServer, free_port

pytestmark = pytest.mark.integration


def test_a_replica_started_before_its_server_serves_the_champion_once_registered(tmp_path):
    port = free_port()
    config = RatchetConfig()
    with Fleet.start(n_replicas=1, tracking_uri=f"http://127.0.0.1:{port}",
                     model_name=config.model_name, bootstrap=None, workdir=tmp_path / "serve",
                     admin_token="t" * 24, wait=False) as fleet:
        time.sleep(6.0)  # the replica has imported its engine and found no server
        assert fleet.replicas[0].proc.poll() is None
        with MlflowServer.launch(tmp_path / "mlflow", port=port) as server:
            server.wait_ready()
            version = ensure_champion(config, tracking_uri=server.uri, workdir=tmp_path)
            registered = time.monotonic()
            fleet.wait_ready(timeout_s=60.0, version=version)
            waited = time.monotonic() - registered
    assert waited < 20.0, f"the replica took {waited:.1f} s after the champion was registered"

"""`ratchet serve`: one replica of the champion, with everything it needs, until Ctrl-C/SIGTERM.

Uses the given broker and MLflow server or starts the embedded ones under the workdir, starts one
replica process (deploy/fleet/fleet.py) with a random admin token at the same time (it waits for
the registry's champion itself), bootstraps a champion when the registry has none
(ratchet/bootstrap.py), creates a client API key for the signals API, prints the address and a
line ``API key: KEY``, and waits. On Ctrl-C or SIGTERM (the CLI turns it into SystemExit),
start-up included, everything it started is stopped by PID: the replica, then the MLflow server
and the broker.

Deliberately left out: more than one replica and a router (the demo and the rollout do that),
binding anything but 127.0.0.1.
"""

from __future__ import annotations

import logging
import secrets
import time
from pathlib import Path

from ratchet.config import RatchetConfig

log = logging.getLogger(__name__)


def run(
    config: RatchetConfig,
    *,
    workdir: Path,
    port: int | None,
    bootstrap: str | None,
    tracking_uri: str | None,
) -> int:
    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    try:  # a Ctrl-C at any point, start-up included, stops what was started, quietly
        return _serve(config, workdir=workdir, port=port, bootstrap=bootstrap,
                      tracking_uri=tracking_uri)
    except KeyboardInterrupt:
        return 0


def _serve(config: RatchetConfig, *, workdir: Path, port: int | None, bootstrap: str | None,
           tracking_uri: str | None) -> int:
    from contextlib import ExitStack

    from deploy.fleet.fleet import Fleet
    from runtime.services import Broker, MlflowServer

    admin_token = secrets.token_urlsafe(24)
    with ExitStack() as stack:
        # Everything that takes seconds starts at once: the broker (ready in a fraction of a
        # second), the MLflow server and the replica, which imports its engine and waits for the
        # registry's champion itself; this process does its own imports meanwhile.
        if bootstrap is None:
            broker = stack.enter_context(Broker.start(workdir / "broker"))
            bootstrap = broker.bootstrap
        server = None
        if tracking_uri is None:
            server = stack.enter_context(MlflowServer.launch(workdir / "mlflow"))
            tracking_uri = server.uri
        fleet = stack.enter_context(Fleet.start(
            n_replicas=1, tracking_uri=tracking_uri, model_name=config.model_name,
            bootstrap=bootstrap, workdir=workdir / "serve", admin_token=admin_token,
            port=port, api_keys_path=workdir / "api_keys.json", name="serve", wait=False,
        ))
        print(f"ratchet serve: starting the broker, MLflow and a replica of {config.model_name}"
              " ...", flush=True)
        from ingest.kafka_io import ensure_topics
        from ratchet.bootstrap import ensure_champion

        ensure_topics(bootstrap)
        if server is not None:
            server.wait_ready()
        version = ensure_champion(config, tracking_uri=tracking_uri, workdir=workdir)
        fleet.wait_ready()
        key = fleet.create_api_key("ratchet-serve")
        replica = fleet.replicas[0]
        print(f"ratchet serve: {config.model_name} v{version} at {replica.url}", flush=True)
        print(f"Kafka: {bootstrap}  MLflow: {tracking_uri}", flush=True)
        print(f"Admin token: {admin_token}", flush=True)
        print(f"API key: {key}", flush=True)
        print("Ctrl-C to stop", flush=True)
        while replica.proc.poll() is None:
            time.sleep(0.5)
        log.error("the replica exited with %s; see %s", replica.proc.returncode,
                  replica.log_path)
        return 1

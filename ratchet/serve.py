"""`ratchet serve`: one replica of the champion, with everything it needs, until Ctrl-C/SIGTERM.

Uses the given broker and MLflow server or starts the embedded ones under the workdir
(ratchet/runner.py ``services``), bootstraps a champion when the registry has none
(ratchet/bootstrap.py), starts one replica process (deploy/fleet/fleet.py) with a random admin
token,
creates a client API key for the signals API, prints the address and a line ``API key: KEY``, and
waits. On Ctrl-C or SIGTERM (the CLI turns it into SystemExit) everything it started is stopped by
PID: the replica, then the MLflow server and the broker.

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
    from deploy.fleet.fleet import Fleet
    from ratchet.bootstrap import ensure_champion
    from ratchet.runner import services

    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    admin_token = secrets.token_urlsafe(24)
    with services(workdir, bootstrap=bootstrap, tracking_uri=tracking_uri) as ep:
        version = ensure_champion(config, tracking_uri=ep.tracking_uri, workdir=workdir)
        with Fleet.start(
            n_replicas=1, tracking_uri=ep.tracking_uri, model_name=config.model_name,
            bootstrap=ep.bootstrap, workdir=workdir / "serve", admin_token=admin_token,
            port=port, api_keys_path=workdir / "api_keys.json", name="serve",
        ) as fleet:
            key = fleet.create_api_key("ratchet-serve")
            replica = fleet.replicas[0]
            print(f"ratchet serve: {config.model_name} v{version} at {replica.url}", flush=True)
            print(f"Kafka: {ep.bootstrap}  MLflow: {ep.tracking_uri}", flush=True)
            print(f"Admin token: {admin_token}", flush=True)
            print(f"API key: {key}", flush=True)
            print("Ctrl-C to stop", flush=True)
            try:
                while replica.proc.poll() is None:
                    time.sleep(0.5)
            except KeyboardInterrupt:
                return 0
            log.error("the replica exited with %s; see %s", replica.proc.returncode,
                      replica.log_path)
            return 1

"""MLflow's tracking server as ONE process: ``python -m runtime.mlflow_server_main``.

``mlflow server`` is a launcher: it imports mlflow, prepares the stores, then starts ``python -m
uvicorn mlflow.server.fastapi_app:app`` as a child and waits for it. Started that way a service
is two processes that each import mlflow (~8 s apiece on a loaded 2-core machine), and the
kernel's die-with-parent signal (runtime/services.py) reaches only the launcher: the uvicorn
grandchild outlives a SIGKILLed starter. Here the same app runs under uvicorn in this process,
which is the way MLflow documents for a server built by importing the app (see
``mlflow.genai.scorers.base._is_tracking_server_process``).

What ``mlflow server --backend-store-uri B --artifacts-destination D`` passes to its app is
repeated in ``server_env``, the one place that names MLflow's server settings: the app reads them
from environment variables whose names are the constants of ``mlflow.server.constants``
(internal to MLflow; imported by name, never spelt out here). tests/integration/test_services.py
fails loudly if a release changes them: it creates an experiment, logs an artifact through the
server and finds the row in B and the file in D.

Job execution stays off (``MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false`` from the caller): no job
runner is started here, and the app's job API says so. Deliberately left out: every other
``mlflow server`` option (auth app, workspaces, Prometheus, static prefix, several workers, a
read replica), and any host beyond what the caller binds.
"""

from __future__ import annotations

import argparse
import os
import sys


def server_env(backend_store_uri: str, artifacts_destination: str) -> dict[str, str]:
    """The variables ``mlflow server`` sets for its app, for a store at ``backend_store_uri``
    (also the model registry's) whose artifacts the server proxies to ``artifacts_destination``.

    Imports ``mlflow.server``: call after ``import uvicorn`` (see ``main``).
    """
    from mlflow.server import constants
    from mlflow.utils.server_cli_utils import resolve_default_artifact_root

    return {
        constants.BACKEND_STORE_URI_ENV_VAR: backend_store_uri,
        constants.REGISTRY_STORE_URI_ENV_VAR: backend_store_uri,
        # with artifacts served, runs record "mlflow-artifacts:/" and the server writes to D
        constants.ARTIFACT_ROOT_ENV_VAR: resolve_default_artifact_root(
            True, None, backend_store_uri
        ),
        constants.SERVE_ARTIFACTS_ENV_VAR: "true",
        constants.ARTIFACTS_DESTINATION_ENV_VAR: artifacts_destination,
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend-store-uri", required=True)
    p.add_argument("--artifacts-destination", required=True)
    p.add_argument("--host", required=True)
    p.add_argument("--port", type=int, required=True)
    args = p.parse_args(argv)

    # before mlflow.server: its Flask app sees the server running it (uvicorn in sys.modules) and
    # turns on its security middleware, and treats this process as the server (no scorer code)
    import uvicorn

    os.environ.update(server_env(args.backend_store_uri, args.artifacts_destination))
    from mlflow.server.fastapi_app import app
    from mlflow.server.handlers import initialize_backend_stores

    # as `mlflow server` does before serving: creates or migrates the database, fails fast
    initialize_backend_stores(args.backend_store_uri, args.backend_store_uri)
    uvicorn.run(app, host=args.host, port=args.port, timeout_graceful_shutdown=5)


if __name__ == "__main__":
    sys.exit(main())

"""The serving app of one replica, built by ``create_app(settings)`` — nothing is created at import.

At start-up a background thread resolves the configured alias (or pinned version) in the MLflow
registry, downloads the checkpoint and builds the model; ``/readyz`` answers 503 until then, and the
thread retries while the registry or the alias is not there yet. Requests are served by
deploy/replica/routes/ (the OpenAI-compatible API in deploy/replica/routes/completions.py) and
sampled by the
engine the settings name (deploy/replica/engines/); behaviour events go through
deploy/replica/behaviour_log.py.
Signals about served responses (deploy/replica/routes/signals.py) are checked against
``app.state.responses`` and authenticated by the client keys in ``app.state.api_keys``.

Run one replica with ``python -m deploy.replica.serve_main`` (reads ``RATCHET_*`` variables).

Deliberately left out: routing between replicas (deploy/fleet/router.py) and process management
(deploy/fleet/fleet.py).
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import asynccontextmanager

from fastapi import FastAPI

from deploy.replica import errors
from deploy.replica.api_keys import ApiKeyStore
from deploy.replica.behaviour_log import BehaviourLogger
from deploy.replica.engines import make_engine
from deploy.replica.http_limits import RequestLimits
from deploy.replica.metrics import MetricsMiddleware, ServerMetrics
from deploy.replica.model_host import ModelHost
from deploy.replica.responses import ResponseMemory
from deploy.replica.routes import admin, completions, health, keys, metrics, signals
from deploy.replica.settings import ServerSettings
from deploy.replica.spool import Spool

log = logging.getLogger(__name__)


class _InitialLoad:
    """Loads the first model in a thread, retrying until it succeeds or the app stops."""

    def __init__(self, host: ModelHost, settings: ServerSettings) -> None:
        self.host, self.settings = host, settings
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="initial-load", daemon=True)

    def _run(self) -> None:
        from mlflow.exceptions import MlflowException

        delay, unset_logged = 0.5, False
        while not self.stop.is_set() and self.host.current is None:
            if not _tracking_server_answers(self.host.tracking_uri):
                # Started beside the server (`ratchet serve`): wait for it here, in short quiet
                # polls, rather than in the MLflow client's retries with their long backoff.
                self.host.load_error = f"the tracking server {self.host.tracking_uri} is not up"
                self.stop.wait(0.25)
                continue
            try:
                version = self.settings.version or self.host.resolve(self.settings.alias)
            except LookupError as exc:  # no champion yet: a bootstrap may be registering it
                self.host.load_error = f"{type(exc).__name__}: {exc}"
                if not unset_logged:
                    log.warning("no version to load (%s); polling every %.1fs", exc, _UNSET_POLL_S)
                    unset_logged = True
                self.stop.wait(_UNSET_POLL_S)
                continue
            except (MlflowException, OSError) as exc:
                self.host.load_error = f"{type(exc).__name__}: {exc}"
                log.warning("no version to load (%s); retrying in %.1fs", exc, delay)
            else:
                try:
                    self.host.load(version)
                    log.info("replica %s serves version %d", self.settings.replica_id, version)
                    return
                except Exception:  # noqa: BLE001  (recorded in host.load_error, shown in /readyz)
                    log.warning("loading version %d failed (%s); retrying in %.1fs",
                                version, self.host.load_error, delay)
            self.stop.wait(delay)
            delay = min(delay * 2, 5.0)


_UNSET_POLL_S = 0.5
"""How often a replica asks for an alias that is not set yet (one small registry request)."""


def _tracking_server_answers(uri: str) -> bool:
    """Whether an http(s) tracking server answers at all now (any HTTP status: a server behind a
    proxy may refuse ``/health``); other stores: always."""
    if not uri.startswith(("http://", "https://")):
        return True
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=5):
            return True
    except urllib.error.HTTPError:
        return True
    except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
        return False


def create_app(settings: ServerSettings) -> FastAPI:
    """Build the app: state on ``app.state``, routers per resource, metrics, body limits (size
    and time; the header time limit is the server's, deploy/replica/serve_main.py)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        import torch

        torch.set_num_threads(settings.torch_threads)
        loader = _InitialLoad(app.state.host, settings)
        loader.thread.start()
        app.state.engine.start()
        try:
            yield
        finally:
            loader.stop.set()
            app.state.engine.close()
            if app.state.behaviour_logger is not None:
                app.state.behaviour_logger.close()

    app = FastAPI(title="ratchet replica", version="1", lifespan=lifespan)
    app.state.settings = settings
    app.state.started_unix = time.time()
    app.state.host = ModelHost(
        tracking_uri=settings.tracking_uri,
        model_name=settings.model_name,
        cache_dir=settings.cache_dir,
    )
    app.state.engine = make_engine(settings.engine, app.state.host)
    app.state.behaviour_logger = _make_logger(settings)
    app.state.metrics = ServerMetrics(replica=settings.replica_id)
    app.state.metrics.attach(app.state.behaviour_logger, app.state.host)
    app.state.api_keys = ApiKeyStore(settings.api_keys_path)
    app.state.responses = ResponseMemory(
        max_entries=settings.response_memory, max_age_s=settings.signal_max_age_s
    )
    for module in (completions, signals, health, admin, keys, metrics):
        app.include_router(module.router)
    errors.install(app)
    app.add_middleware(  # 413 / 408 in OpenAI's shape, chunked bodies included
        RequestLimits, max_body_bytes=settings.max_body_bytes,
        body_timeout_s=settings.body_timeout_s,
    )
    app.add_middleware(MetricsMiddleware, metrics=app.state.metrics)
    return app


def _make_logger(settings: ServerSettings) -> BehaviourLogger | None:
    if not settings.log_behaviour:
        return None
    spool = Spool(settings.spool_dir / settings.replica_id, max_bytes=settings.spool_max_bytes)
    return BehaviourLogger(
        bootstrap=settings.kafka_bootstrap, spool=spool, queue_max=settings.queue_max_events
    )

"""Entry point of one replica process: settings from ``RATCHET_*`` variables, then uvicorn.

``python -m deploy.replica.serve_main`` — the fleet starts replicas this way. Settings are read
(and a
default admin token refused) before anything heavy is imported. Uvicorn serves with the header
deadline of deploy/replica/http_limits.py (``RATCHET_HEADER_TIMEOUT_S``); the body deadline is the
app's.
"""

from __future__ import annotations

import logging


def main() -> None:
    from deploy.replica.settings import ServerSettings

    settings = ServerSettings()  # type: ignore[call-arg]  # fields come from the environment
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    import uvicorn

    from deploy.replica.http_limits import header_timeout_protocol
    from deploy.replica.server import create_app

    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        http=header_timeout_protocol(settings.header_timeout_s),
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=10,
    )


if __name__ == "__main__":
    main()

"""A replica's first load: while its champion is not registered yet it asks every half second
(a replica started beside the bootstrap picks the champion up at once, not after a backoff grown
to 5 s); while its tracking server does not answer it polls the server itself and makes no
registry call."""

from __future__ import annotations

import socket
from types import SimpleNamespace

from deploy.replica.server import _InitialLoad


class _Host:
    def __init__(self, tracking_uri: str, unset_calls: int) -> None:
        self.tracking_uri, self.unset_calls = tracking_uri, unset_calls
        self.current = self.load_error = None
        self.resolved = 0

    def resolve(self, alias: str) -> int:
        self.resolved += 1
        if self.resolved <= self.unset_calls:
            raise LookupError(f"alias {alias!r} is not set")
        return 1

    def load(self, version: int) -> None:
        self.current = version


def _run(host: _Host, max_waits: int = 100) -> list[float]:
    loader = _InitialLoad(host, SimpleNamespace(version=None, alias="champion",
                                                replica_id="r0"))
    waits: list[float] = []

    def wait(seconds: float) -> bool:
        waits.append(seconds)
        if len(waits) >= max_waits:
            loader.stop.set()
        return loader.stop.is_set()

    loader.stop.wait = wait
    loader._run()
    return waits


def test_an_unset_champion_is_asked_for_every_half_second(tmp_path):
    host = _Host(f"file://{tmp_path}", unset_calls=12)
    waits = _run(host)
    assert host.current == 1 and host.resolved == 13
    assert waits == [0.5] * 12


def test_a_silent_tracking_server_is_polled_without_registry_calls():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    host = _Host(f"http://127.0.0.1:{port}", unset_calls=0)
    waits = _run(host, max_waits=5)
    assert host.resolved == 0 and host.current is None
    assert waits == [0.25] * 5 and "not up" in host.load_error

"""A lock per registered model that works across machines: a lease in an MLflow model tag.

The lease is the registered model's tag ``ratchet.lease`` = ``{"owner", "expires"}`` (wall-clock
epoch seconds). ``acquire`` takes it when it is free, expired or already ours: it writes its own
tag, waits ``settle_s`` and re-reads; only if the tag still names it does it hold the lease
(read-verify: MLflow has no compare-and-set). While held, a daemon thread renews the expiry every
``ttl_s / 3`` and notices when someone else has taken the tag (``check`` then raises). ``release``
deletes the tag if it is still ours. A holder that dies stops renewing; its lease expires after
``ttl_s`` and the next cycle takes over.

Residual race (documented, not closed): two contenders that both read "free", where the later
writer's tag lands more than ``settle_s`` after the earlier one re-read, both believe they hold
the lease. Each write and re-read is one HTTP round trip to the same tracking server, so the
window is a write delayed by more than ``settle_s`` (default 1 s). What such a double holder can
still not do is promote from a stale champion: promotion is compare-and-set on the ``champion``
alias (runtime/registry.py ``promote(expected=...)``), re-read under the lease right before the
alias moves; that leaves the few milliseconds between that re-read and the write.
Deliberately left out: fencing tokens on every registry write (MLflow cannot check them).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid

log = logging.getLogger(__name__)

TAG = "ratchet.lease"


class LeaseHeld(RuntimeError):
    """Someone else holds the lease (after waiting as long as allowed)."""


class LeaseLost(RuntimeError):
    """The lease was taken by someone else while we believed we held it."""


def default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class ModelLease:
    """``with ModelLease(uri, name): ...`` holds the model's lease for the block."""

    def __init__(
        self,
        tracking_uri: str,
        model_name: str,
        *,
        ttl_s: float = 60.0,
        wait_s: float = 0.0,
        settle_s: float = 1.0,
        poll_s: float = 2.0,
        owner: str | None = None,
    ) -> None:
        self.tracking_uri = tracking_uri
        self.model_name = model_name
        self.ttl_s, self.wait_s, self.settle_s, self.poll_s = ttl_s, wait_s, settle_s, poll_s
        self.owner = owner or default_owner()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lost: str | None = None

    # -- registry access -------------------------------------------------------------------------
    def _client(self):
        from mlflow import MlflowClient

        return MlflowClient(tracking_uri=self.tracking_uri, registry_uri=self.tracking_uri)

    def read(self) -> dict | None:
        """The current lease tag, or None (no tag, or no registered model yet)."""
        from mlflow.exceptions import MlflowException

        try:
            tags = self._client().get_registered_model(self.model_name).tags
        except MlflowException:
            return None
        raw = tags.get(TAG)
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return None

    def _write(self) -> None:
        value = json.dumps({"owner": self.owner, "expires": time.time() + self.ttl_s})
        self._client().set_registered_model_tag(self.model_name, TAG, value)

    def _ensure_model(self) -> None:
        from mlflow.exceptions import MlflowException

        client = self._client()
        try:
            client.get_registered_model(self.model_name)
        except MlflowException:
            try:
                client.create_registered_model(self.model_name)
            except MlflowException:
                pass  # created meanwhile by someone else: fine

    # -- protocol --------------------------------------------------------------------------------
    def _free(self, cur: dict | None) -> bool:
        if cur is None or cur.get("owner") == self.owner or cur.get("expires", 0) < time.time():
            return True
        return _dead_on_this_host(str(cur.get("owner", "")))

    def acquire(self) -> None:
        """Take the lease, waiting up to ``wait_s``; raises ``LeaseHeld`` naming the holder."""
        self._ensure_model()
        deadline = time.monotonic() + self.wait_s
        while True:
            cur = self.read()
            if self._free(cur):
                self._write()
                time.sleep(self.settle_s)
                cur = self.read()
                if cur is not None and cur.get("owner") == self.owner:
                    break
            if time.monotonic() >= deadline:
                left = (cur or {}).get("expires", 0) - time.time()
                raise LeaseHeld(
                    f"model {self.model_name!r} is locked by another cycle "
                    f"(owner {(cur or {}).get('owner')}, lease expires in {left:.0f} s); "
                    f"waited {self.wait_s:.0f} s. Run one controller per model, or retry later."
                )
            time.sleep(min(self.poll_s, max(0.0, deadline - time.monotonic())) or 0.01)
        log.debug("lease on %s held by %s", self.model_name, self.owner)
        self._stop.clear()
        self._thread = threading.Thread(target=self._renew, name="lease-renew", daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            try:
                cur = self.read()
                if cur is not None and cur.get("owner") != self.owner:
                    self.lost = f"lease taken by {cur.get('owner')}"
                    log.error("lease on %s lost: %s", self.model_name, self.lost)
                    return
                self._write()
            except Exception:  # a registry hiccup: try again at the next tick
                log.warning("lease renewal failed", exc_info=True)

    def check(self) -> None:
        """Raise ``LeaseLost`` unless the tag still names us (call before anything irreversible)."""
        cur = self.read()
        if self.lost or cur is None or cur.get("owner") != self.owner:
            why = self.lost or f"holder is {(cur or {}).get('owner')}"
            raise LeaseLost(f"lease on {self.model_name!r} no longer ours: {why}")

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        try:
            cur = self.read()
            if cur is not None and cur.get("owner") == self.owner:
                self._client().delete_registered_model_tag(self.model_name, TAG)
        except Exception:
            log.warning("could not release the lease on %s (it expires)", self.model_name)

    def __enter__(self) -> ModelLease:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _dead_on_this_host(owner: str) -> bool:
    """A holder on this host whose process is gone (killed): no need to wait for the expiry."""
    host, _, rest = owner.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False

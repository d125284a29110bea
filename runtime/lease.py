"""A lock per registered model that works across machines: a lease in an MLflow model tag,
with a fencing token.

The lease is the registered model's tag ``ratchet.lease`` = ``{"owner", "expires", "token"}``
(wall-clock epoch seconds). The token comes from a second tag, ``ratchet.fence``, that only
grows: each acquisition claims ``fence + 1`` (creates a name in MLflow's store, which only one
contender can), writes it there and into its lease, and the fence is never deleted. ``acquire``
takes the lease when it is free, expired or already ours and the claim succeeds: it writes the
fence and its tag, waits ``settle_s`` and re-reads both; only if the lease still names it and
the fence still holds its token does it hold the lease (MLflow has no compare-and-set on tags).
While held, a daemon thread renews the expiry every ``ttl_s / 3`` as long as
the lease still names it with its token.

Fencing: a holder that finds its lease gone, another owner on it, or a larger fence (it stalled
past its lifetime and someone else acquired, perhaps released since) has lost the lease for good:
the renewal thread stops and never writes the tag again, and ``check`` raises ``LeaseLost``.
Every write that matters (a gate record, an alias move, an abandonment tag) calls ``check``
right before it. ``release`` deletes the lease tag if it is still ours; the fence stays. A
holder that dies stops renewing; its lease expires after ``ttl_s`` and the next cycle takes
over with a larger token.

Residual race (documented, not closed): MLflow cannot check a token on the write itself, so a
holder that stalls between ``check`` and the write it guards (one HTTP round trip) can still
land that one write. Two contenders that read the same fence cannot both hold: one of them
loses the claim and waits. Promotion is in addition compare-and-set on the
``champion`` alias (runtime/registry.py ``promote(expected=...)``), which also refuses a version
tagged abandoned.
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
FENCE = "ratchet.fence"
CLAIMS = ".ratchet-lease"
"""Prefix of the (deleted) experiments that claim fencing tokens, one per acquisition."""


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
        self.token = 0
        """This holder's fencing token (0: never acquired)."""

    # -- registry access -------------------------------------------------------------------------
    def _client(self):
        from mlflow import MlflowClient

        return MlflowClient(tracking_uri=self.tracking_uri, registry_uri=self.tracking_uri)

    def _tags(self) -> dict[str, str]:
        from mlflow.exceptions import MlflowException

        try:
            return self._client().get_registered_model(self.model_name).tags
        except MlflowException:
            return {}

    def read(self) -> dict | None:
        """The current lease tag, or None (no tag, or no registered model yet)."""
        return _parse(self._tags().get(TAG))

    def fence(self) -> int:
        """The largest token ever handed out for this model (0: none yet)."""
        raw = self._tags().get(FENCE, "0")
        return int(raw) if raw.isdigit() else 0

    def _write(self) -> None:
        value = json.dumps(
            {"owner": self.owner, "expires": time.time() + self.ttl_s, "token": self.token}
        )
        self._client().set_registered_model_tag(self.model_name, TAG, value)

    def _why_lost(self) -> str | None:
        """Why the lease is no longer ours (None: it still is), from one read of both tags."""
        tags = self._tags()
        cur, fence = _parse(tags.get(TAG)), tags.get(FENCE, "0")
        if fence.isdigit() and int(fence) > self.token:
            return f"a later holder took token {fence} (ours is {self.token})"
        if cur is None:
            return "the lease was released or expired and taken since"
        if cur.get("owner") != self.owner or cur.get("token") != self.token:
            return f"lease taken by {cur.get('owner')}"
        return None

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

    def _claim(self, token: int) -> bool:
        """Make ``token`` ours alone, or return False when another contender claimed it first.

        The claim is the creation of an experiment named after the model and the token: MLflow
        creates a name once (a unique key in its store), so of two contenders that read the same
        fence only one gets the token. The experiment is deleted at once (it leaves the UI; a
        deleted experiment keeps its name, so the token stays taken)."""
        from mlflow.exceptions import MlflowException

        client = self._client()
        try:
            experiment_id = client.create_experiment(f"{CLAIMS}/{self.model_name}/{token}")
        except MlflowException as e:
            if e.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
            return False
        self.token = token
        try:
            client.delete_experiment(experiment_id)
        except MlflowException:
            log.warning("could not hide the lease claim %s/%s/%d", CLAIMS, self.model_name, token)
        return True

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
            if self._free(cur) and self._claim(self.fence() + 1):
                self._client().set_registered_model_tag(self.model_name, FENCE, str(self.token))
                self._write()
                time.sleep(self.settle_s)
                cur = self.read()
                if self._why_lost() is None:
                    break
            if time.monotonic() >= deadline:
                left = (cur or {}).get("expires", 0) - time.time()
                raise LeaseHeld(
                    f"model {self.model_name!r} is locked by another cycle "
                    f"(owner {(cur or {}).get('owner')}, lease expires in {left:.0f} s); "
                    f"waited {self.wait_s:.0f} s. Run one controller per model, or retry later."
                )
            time.sleep(min(self.poll_s, max(0.0, deadline - time.monotonic())) or 0.01)
        log.debug("lease on %s held by %s, token %d", self.model_name, self.owner, self.token)
        self.lost = None
        self._stop.clear()
        self._thread = threading.Thread(target=self._renew, name="lease-renew", daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        """Extend the expiry while the lease is ours; once lost, stop for good (never retake)."""
        while not self._stop.wait(self.ttl_s / 3):
            try:
                why = self._why_lost()
                if why is not None:
                    self.lost = why
                    log.error("lease on %s lost: %s", self.model_name, why)
                    return
                self._write()
            except Exception:  # a registry hiccup: try again at the next tick
                log.warning("lease renewal failed", exc_info=True)

    def check(self) -> None:
        """Raise ``LeaseLost`` unless the lease still names us with our token and no later token
        was handed out (call right before any write that matters)."""
        why = self.lost or self._why_lost()
        if why is not None:
            self.lost = why
            raise LeaseLost(f"lease on {self.model_name!r} no longer ours: {why}")

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        try:
            if self._why_lost() is None:
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


def _parse(raw: str | None) -> dict | None:
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None

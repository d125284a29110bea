"""Per-client API keys: created once, stored hashed, revocable, optionally grouped in an
organisation.

A key authenticates signals (always) and inference (when the replica requires keys). A response
belongs to the key that was served it; a signal about it is accepted from that key, or from any
key of the same organisation (``org``) when the response's key has one.

A key reads ``rk_<key_id>_<secret>``. Only ``hmac_sha256(salt, secret)`` and a random per-key salt
are stored, in one small JSON file (mode 0600) that every replica of a fleet shares: a replica
re-reads the file when it changes, so a key created or revoked through any replica (or by
``ratchet serve``) is honoured by all of them. Writers take an exclusive ``flock`` on a lock file
beside the store and replace the store atomically.

Deliberately left out: scopes and quotas per key, expiry (revoke instead), and the admin token,
which stays a separate secret in deploy/replica/settings.py.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os
import secrets
import threading
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

_PREFIX = "rk"


class InvalidApiKey(Exception):
    """The key is malformed, unknown or revoked (the message says which, never the key)."""


class ApiClient(NamedTuple):
    """Who a valid key belongs to: its id and its organisation (None if not grouped)."""

    key_id: str
    org: str | None = None

    def may_signal(self, owner: ApiClient | None) -> bool:
        """Whether this client may send signals about a response served to ``owner``: its own,
        its organisation's, or one served without a key (a replica that does not require keys)."""
        if owner is None or owner.key_id == self.key_id:
            return True
        return owner.org is not None and owner.org == self.org


def _digest(salt: bytes, secret: str) -> str:
    return hmac.new(salt, secret.encode(), hashlib.sha256).hexdigest()


class ApiKeyStore:
    """The key file at ``path``; thread-safe within a process, flock-safe across processes."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._keys: dict[str, dict] = {}

    # -- reading ------------------------------------------------------------------------------
    def _refresh(self) -> None:
        """Re-read the file if its modification time or size changed since the last read."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self._stamp, self._keys = None, {}
            return
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp != self._stamp:
            self._keys = json.loads(self.path.read_text())["keys"]
            self._stamp = stamp

    def verify(self, key: str) -> ApiClient:
        """The client of a valid, unrevoked ``key``; raises InvalidApiKey otherwise."""
        parts = key.split("_", 2)
        if len(parts) != 3 or parts[0] != _PREFIX:
            raise InvalidApiKey("malformed API key (expected rk_<id>_<secret>)")
        key_id, secret = parts[1], parts[2]
        with self._lock:
            self._refresh()
            entry = self._keys.get(key_id)
        if entry is None:
            raise InvalidApiKey("unknown API key")
        if not hmac.compare_digest(_digest(bytes.fromhex(entry["salt"]), secret), entry["hash"]):
            raise InvalidApiKey("unknown API key")
        if entry.get("revoked_at"):
            raise InvalidApiKey(f"API key {key_id} was revoked")
        return ApiClient(key_id, entry.get("org"))

    def list(self) -> list[dict]:
        """Every key's id, name, creation and revocation time (never the hash or salt)."""
        with self._lock:
            self._refresh()
            keys = dict(self._keys)
        return [
            {"key_id": k, "name": v["name"], "org": v.get("org"), "created": v["created"],
             "revoked_at": v["revoked_at"]}
            for k, v in keys.items()
        ]

    # -- writing ------------------------------------------------------------------------------
    def create(self, name: str, org: str | None = None) -> tuple[str, str]:
        """A new key for client ``name`` (in organisation ``org``, if given): ``(key_id, key)``;
        the key is shown only here."""
        key_id, secret = secrets.token_hex(4), secrets.token_urlsafe(24)
        salt = secrets.token_bytes(16)
        entry = {
            "name": name,
            "org": org,
            "salt": salt.hex(),
            "hash": _digest(salt, secret),
            "created": datetime.now(UTC).isoformat(),
            "revoked_at": None,
        }
        with self._write() as keys:
            keys[key_id] = entry
        return key_id, f"{_PREFIX}_{key_id}_{secret}"

    def revoke(self, key_id: str) -> bool:
        """Revoke ``key_id``; False if there is no such key. Revoking twice is a no-op."""
        with self._write() as keys:
            entry = keys.get(key_id)
            if entry is None:
                return False
            entry["revoked_at"] = entry["revoked_at"] or datetime.now(UTC).isoformat()
        return True

    @contextmanager
    def _write(self):
        """Read-modify-write under an exclusive flock; the new file replaces the old atomically."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock_path = self.path.with_name(self.path.name + ".lock")
        with self._lock, open(lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            keys = json.loads(self.path.read_text())["keys"] if self.path.exists() else {}
            yield keys
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump({"version": 1, "keys": keys}, f, indent=1)
            os.replace(tmp, self.path)
            self._stamp = None  # re-read on next use

"""What a replica remembers of the responses it served, so signals can be checked against them.

``ResponseMemory`` maps ``response_id`` to the served text, its creation time and conversation,
the client it was served to (``owner``: key id and organisation, None when served without a key),
and the signals already accepted for it. Ownership is checked with that same O(1) lookup: the
signals routes answer a client that may not signal about a response exactly as for an unknown one
(404), so a key cannot probe which ids exist.

It is bounded twice: by entries (the oldest is forgotten
first) and by age (a response older than ``max_age_s`` is unknown). A signal for an unknown
response is refused (404) and a second signal of the same kind (and edit window) is a duplicate
(409).

Deliberately left out: sharing the memory between replicas (the router sends a signal to the
replica that served the response) and surviving a restart (signals for responses served before
it are refused as unknown).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from deploy.replica.api_keys import ApiClient


@dataclass
class ServedResponse:
    """One served response and the signal keys already accepted for it."""

    text: str
    created: datetime
    conversation_id: str
    owner: ApiClient | None = None
    signals: set[str] = field(default_factory=set)


class ResponseMemory:
    """Bounded, thread-safe ``response_id -> ServedResponse``."""

    def __init__(self, *, max_entries: int, max_age_s: float) -> None:
        self.max_entries = max_entries
        self.max_age = timedelta(seconds=max_age_s)
        self._items: OrderedDict[str, ServedResponse] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def remember(
        self,
        response_id: str,
        *,
        text: str,
        created: datetime,
        conversation_id: str,
        owner: ApiClient | None = None,
    ) -> None:
        """Record a served response (called by the completion routes)."""
        with self._lock:
            self._items[response_id] = ServedResponse(text, created, conversation_id, owner)
            self._items.move_to_end(response_id)
            while len(self._items) > self.max_entries:
                self._items.popitem(last=False)

    def get(
        self,
        response_id: str,
        now: datetime | None = None,
        client: ApiClient | None = None,
    ) -> ServedResponse | None:
        """The served response, or None if never served here, forgotten, too old, or (with
        ``client``) served to a client that ``client`` may not signal for."""
        now = now or datetime.now(UTC)
        with self._lock:
            item = self._items.get(response_id)
        if item is None or now - item.created > self.max_age:
            return None
        if client is not None and not client.may_signal(item.owner):
            return None
        return item

    def claim(self, response_id: str, signal_key: str) -> bool:
        """Mark ``signal_key`` accepted for ``response_id``; False if it already was."""
        with self._lock:
            item = self._items.get(response_id)
            if item is None or signal_key in item.signals:
                return False
            item.signals.add(signal_key)
            return True

    def release(self, response_id: str, signal_key: str) -> None:
        """Undo a ``claim`` whose event could not be queued, so the client may retry."""
        with self._lock:
            item = self._items.get(response_id)
            if item is not None:
                item.signals.discard(signal_key)

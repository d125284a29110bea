"""The model a replica serves, loaded by registry version, swapped atomically on reload.

``ModelHost.load(version)`` downloads the checkpoint directory from MLflow
(runtime.registry.download_checkpoint), builds the model from safetensors (never unpickles), and
only then replaces the served model — a request holds a reference to the ``ServedModel`` it started
with, so a swap never disturbs a request in flight.

Deliberately left out: deciding which version to serve (the fleet, the rollout controller).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from runtime import registry

if TYPE_CHECKING:
    from policy.toy.model import MoETransformer


@dataclass(frozen=True)
class ServedModel:
    """One loaded model and the registry version it came from."""

    model: MoETransformer
    version: int


class ModelHost:
    """Holds the served model; ``load`` is serialised, reads are lock-free."""

    def __init__(self, *, tracking_uri: str, model_name: str, cache_dir: Path) -> None:
        self.tracking_uri = tracking_uri
        self.model_name = model_name
        self.cache_dir = Path(cache_dir)
        self._current: ServedModel | None = None
        self._load_lock = threading.Lock()
        self.load_error: str | None = None

    @property
    def current(self) -> ServedModel | None:
        return self._current

    def resolve(self, alias: str) -> int:
        """The version ``alias`` points to; raises LookupError if unset."""
        version = registry.resolve_alias(self.tracking_uri, self.model_name, alias)
        if version is None:
            raise LookupError(f"alias {alias!r} of model {self.model_name!r} is not set")
        return version

    def load(self, version: int) -> ServedModel:
        """Download and build ``version`` fully, then swap it in; returns the new served model."""
        from policy.toy.checkpoint import load_checkpoint

        with self._load_lock:
            if self._current is not None and self._current.version == version:
                return self._current
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            directory = registry.download_checkpoint(
                self.tracking_uri, self.model_name, version, self.cache_dir
            )
            served = ServedModel(load_checkpoint(directory), version)
            self._current = served
            self.load_error = None
            return served

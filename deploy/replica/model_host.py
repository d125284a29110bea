"""The policy a replica serves, loaded by registry version, swapped atomically on reload.

``ModelHost.load(version)`` checks that the version exists (LookupError if not), downloads the
checkpoint directory from MLflow (runtime.registry.download_checkpoint), loads it through the
policy plug (``policy.loader.load_policy``: the toy or a Hugging Face directory, detected from its
files; safetensors only, never unpickled), checks it — every tensor the shape ``config.json``
implies and every floating-point weight finite — and only then replaces the served policy.
A version that fails the checks is refused with ``ModelLoadError``: the previous model keeps
serving and the error stays in ``load_error`` (``/readyz``, ``/metrics``) until a load succeeds.
A request holds a reference to the ``ServedModel`` it started with, so a swap never disturbs a
request in flight.

Deliberately left out: deciding which version to serve (the fleet, the rollout controller).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from runtime import registry

if TYPE_CHECKING:
    from policy.base import Policy


class ModelLoadError(ValueError):
    """A checkpoint that downloads but must not be served (mis-shaped or non-finite weights)."""


@dataclass(frozen=True)
class ServedModel:
    """One loaded policy and the registry version it came from. A bare toy ``MoETransformer``
    given as ``policy`` is wrapped in ``ToyPolicy`` (tests and benches build those directly)."""

    policy: Policy
    version: int
    loaded_unix: float = field(default_factory=time.time)
    """When this replica finished loading it (Unix seconds): ``created`` of ``/v1/models``."""

    def __post_init__(self) -> None:
        if not hasattr(self.policy, "tokenizer_info"):
            from policy.toy.adapter import ToyPolicy

            object.__setattr__(self, "policy", ToyPolicy(self.policy))

    @property
    def model(self):
        """The policy's torch module."""
        return self.policy.module


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
        """Download, build and check ``version``, then swap it in; returns the new served model.

        Raises LookupError (no such version) or ModelLoadError (refused); either way the previous
        model keeps serving and ``load_error`` names the version and the reason.
        """
        with self._load_lock:
            if self._current is not None and self._current.version == version:
                return self._current
            try:
                served = ServedModel(self._build(version), version)
            except Exception as exc:
                self.load_error = f"version {version}: {type(exc).__name__}: {exc}"[:2000]
                raise
            self._current = served
            self.load_error = None
            return served

    def _build(self, version: int) -> Policy:
        if not registry.version_exists(self.tracking_uri, self.model_name, version):
            raise LookupError(f"version {version} of model {self.model_name!r} does not exist")
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        try:
            directory = registry.download_checkpoint(
                self.tracking_uri, self.model_name, version, self.cache_dir
            )
        except FileNotFoundError as exc:  # the version lost its config.json or weights
            raise ModelLoadError(str(exc)) from exc
        return load_checked(directory)


def load_checked(directory: Path) -> Policy:
    """Load the checkpoint in ``directory`` as a policy; ModelLoadError if it cannot be served
    (no loader fits, shapes disagree with config.json, a truncated file, non-finite weights)."""
    import torch
    from safetensors import SafetensorError

    from policy.config import PolicyLoadError
    from policy.loader import load_policy

    try:
        policy = load_policy(directory)
    except PolicyLoadError as exc:  # names the file and the field already
        raise ModelLoadError(str(exc)[:1000]) from exc
    except (RuntimeError, ValueError, KeyError, OSError, SafetensorError) as exc:
        first = str(exc).strip().splitlines()
        raise ModelLoadError(
            f"weights do not match config.json: {' '.join(first[:4])[:600]}"
        ) from exc
    bad = [
        name
        for name, t in policy.module.state_dict().items()
        if t.is_floating_point() and not bool(torch.isfinite(t).all())
    ]
    if bad:
        more = f" (+{len(bad) - 3} more)" if len(bad) > 3 else ""
        raise ModelLoadError(f"non-finite weights in {', '.join(bad[:3])}{more}")
    return policy

"""Engines behind the gateway: the ``Engine`` plug (base.py) and its implementations.

``make_engine(config, host)`` builds the one the settings name; implementations are imported
only when chosen.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from deploy.replica.engines.base import Engine
    from deploy.replica.model_host import ModelHost
    from deploy.replica.settings import TorchEngineConfig, VllmEngineConfig


def policy_source(host: ModelHost):
    """``model_source`` for the torch engine: the host's current policy (toy or Hugging Face) as
    a ``StepModel``, adapted once per loaded version."""
    from deploy.replica.engines.hf_step import step_model

    cache: dict = {}

    def source():
        served = host.current
        if served is None:
            return None
        if cache.get("served") is not served:
            cache["served"], cache["model"] = served, step_model(served.policy, served.version)
        return cache["model"]

    return source


toy_source = policy_source
"""The former name (it serves any policy now)."""


def make_engine(config: TorchEngineConfig | VllmEngineConfig, host: ModelHost) -> Engine:
    if config.type == "torch":
        from deploy.replica.engines.torch_engine import TorchEngine

        return TorchEngine(
            policy_source(host), max_batch=config.max_batch, max_wait_ms=config.max_wait_ms
        )
    from deploy.replica.engines.vllm_engine import ManagedVllm, VllmEngine

    if config.managed:
        server = ManagedVllm(loaded_checkpoint(host), host.cache_dir / "vllm",
                             venv=config.venv, dtype=config.dtype)
        return VllmEngine.managed(server, timeout_s=config.timeout_s)
    return VllmEngine(
        url=config.url,
        served_model=config.served_model,
        timeout_s=config.timeout_s,
        router_pass=policy_source(host) if config.teacher_forced_experts else None,
        version_source=lambda: host.current.version if host.current else None,
    )


def loaded_checkpoint(host: ModelHost, *, wait_s: float = 600.0):
    """A ``ManagedVllm`` source: the version the host has loaded and its checkpoint directory,
    so vLLM serves exactly what ``/admin/reload`` loaded (and checked). At start-up it waits up
    to ``wait_s`` for the replica's first load."""

    def source():
        from runtime import registry

        deadline = time.monotonic() + wait_s
        while host.current is None:
            if time.monotonic() > deadline:
                raise LookupError(f"the replica loaded no version in {wait_s:.0f} s")
            time.sleep(0.2)
        version = host.current.version
        return version, registry.download_checkpoint(host.tracking_uri, host.model_name, version,
                                                     host.cache_dir)

    return source

"""Engines behind the gateway: the ``Engine`` plug (base.py) and its implementations.

``make_engine(config, host)`` builds the one the settings name; implementations are imported
only when chosen.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from deploy.engines.base import Engine
    from deploy.model_host import ModelHost
    from deploy.settings import TorchEngineConfig, VllmEngineConfig


def policy_source(host: ModelHost):
    """``model_source`` for the torch engine: the host's current policy (toy or Hugging Face) as
    a ``StepModel``, adapted once per loaded version."""
    from deploy.engines.hf_step import step_model

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
        from deploy.engines.torch_engine import TorchEngine

        return TorchEngine(
            policy_source(host), max_batch=config.max_batch, max_wait_ms=config.max_wait_ms
        )
    from deploy.engines.vllm_engine import VllmEngine

    return VllmEngine(
        url=config.url,
        served_model=config.served_model,
        timeout_s=config.timeout_s,
        router_pass=policy_source(host) if config.teacher_forced_experts else None,
        version_source=lambda: host.current.version if host.current else None,
    )

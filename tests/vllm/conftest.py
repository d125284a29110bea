"""The optional vLLM tier (``make test-vllm``): runs only when asked for with ``-m vllm`` and when
the vLLM venv (``.cache/vllm-venv``, made by scripts/vllm_venv.sh) is ready; otherwise every
``vllm``-marked test is skipped at collection, saying why, before any service starts. The default
``make test`` never starts (or downloads) vLLM.
"""

from __future__ import annotations

import pytest


def vllm_skip_reason(config: pytest.Config) -> str | None:
    """Why the vLLM tier does not run here, or None."""
    if "vllm" not in (config.option.markexpr or ""):
        return "vLLM tier: run `make test-vllm` (pytest -m vllm tests/vllm)"
    from runtime.vllm_server import venv_problem

    problem = venv_problem()
    return f"vLLM tier: {problem}" if problem else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tier = [item for item in items if item.get_closest_marker("vllm") is not None]
    reason = vllm_skip_reason(config) if tier else None
    if reason:
        for item in tier:
            item.add_marker(pytest.mark.skip(reason=reason))

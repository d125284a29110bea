"""The frozen prefix (policy.hf.FrozenPrefix): a forward that resumes from another forward's
state after the first K decoder layers computes what the whole forward computes."""

import pytest
import torch

from policy.hf import FrozenPrefix

FAMILIES = [("mixtral", {}), ("llama", {"experts": 0}),
            ("qwen3_moe", {"mlp_only_layers": (1,)})]


@pytest.mark.parametrize(("family", "spec"), FAMILIES)
def test_resuming_from_a_prefix_computes_the_whole_forward(tiny_hf, family, spec):
    policy = tiny_hf(family, layers=4, hidden=32, heads=2, kv_heads=1, **spec)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 384, (3, 11), generator=gen)
    targets = torch.randint(0, 384, (3, 11), generator=gen)
    mask = torch.ones(3, 11, dtype=torch.bool)
    mask[0, 7:] = False
    temp = torch.tensor([1.0, 0.8, 1.0])
    with torch.no_grad():
        whole = policy.token_logprobs(ids, targets, mask, temp, capture_prefix=2)
        resumed = policy.token_logprobs(ids, targets, mask, temp, prefix=whole.prefix)
        # cut into rows and padded wider than before: real tokens are unchanged
        rows = whole.prefix.rows([7, 11, 11])
        wide = torch.cat([ids, ids[:, :2]], 1), torch.cat([targets, targets[:, :2]], 1)
        wide_mask = torch.cat([mask, torch.zeros(3, 2, dtype=torch.bool)], 1)
        regrouped = policy.token_logprobs(*wide, wide_mask, temp,
                                          prefix=FrozenPrefix.collate(rows, 13))
    assert torch.allclose(resumed.logprobs[mask], whole.logprobs[mask], atol=1e-6)
    assert torch.allclose(regrouped.logprobs[:, :11][mask], whole.logprobs[mask], atol=1e-5)
    assert torch.equal(resumed.routed_experts, whole.routed_experts)
    assert torch.allclose(resumed.aux_loss, whole.aux_loss, atol=1e-6)
    assert len(whole.prefix.idx) == sum(1 for i in policy.moe_spec.moe_layers if i < 2)
    assert [type(m).__name__ for m in policy.module.base_model.layers][:1] != ["_Passthrough"]


def test_a_prefix_of_other_rows_is_refused(tiny_hf):
    policy = tiny_hf("mixtral", layers=2, hidden=32, heads=2, kv_heads=1)
    ids = torch.randint(0, 384, (2, 5))
    mask = torch.ones(2, 5, dtype=torch.bool)
    with torch.no_grad():
        out = policy.token_logprobs(ids, ids, mask, torch.ones(2), capture_prefix=1)
        with pytest.raises(ValueError, match="prefix hidden states have shape"):
            policy.token_logprobs(ids[:1], ids[:1], mask[:1], torch.ones(1), prefix=out.prefix)

"""``token_logprobs(return_logits=..., return_hidden=...)``: the full logits at temperature 1 and
the final hidden states (the output head's input), for the toy and an HF policy."""

import pytest
import torch

from policy.toy.adapter import ToyPolicy


def _inputs(vocab: int, b: int = 2, t: int = 7):
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab, (b, t + 1), generator=gen)
    pad = torch.ones(b, t, dtype=torch.bool)
    pad[1, -2:] = False
    return ids[:, :-1], ids[:, 1:], pad, torch.tensor([1.0, 0.7])


def _check(policy, head):
    ids, targets, pad, temp = _inputs(policy.tokenizer_info.vocab_size)
    plain = policy.token_logprobs(ids, targets, pad, temp)
    assert plain.logits is None and plain.hidden is None
    out = policy.token_logprobs(ids, targets, pad, temp, return_logits=True, return_hidden=True)
    b, t = ids.shape
    assert out.logits.shape == (b, t, policy.tokenizer_info.vocab_size)
    assert out.logits.dtype == torch.float32 and out.hidden.shape[:2] == (b, t)
    torch.testing.assert_close(out.logits, head(out.hidden).float())
    want = torch.log_softmax(out.logits / temp.view(-1, 1, 1), -1)
    want = want.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(out.logprobs, want, rtol=0, atol=1e-5)
    torch.testing.assert_close(out.logprobs, plain.logprobs, rtol=0, atol=0)
    out.logits[targets.ne(0)].logsumexp(-1).sum().backward()  # the logits carry gradients
    assert head.weight.grad is not None and head.weight.grad.abs().sum() > 0


def test_toy_returns_logits_and_final_hidden(tiny_model):
    policy = ToyPolicy(tiny_model)
    _check(policy, tiny_model.lm_head)
    assert not tiny_model.lm_head._forward_pre_hooks  # the capture hook is removed


@pytest.mark.parametrize("family", ["qwen3_moe", "olmoe"])
def test_hf_returns_logits_and_final_hidden(tiny_hf, family):
    policy = tiny_hf(family)
    policy.module.zero_grad(set_to_none=True)
    _check(policy, policy.module.get_output_embeddings())
    policy.module.zero_grad(set_to_none=True)

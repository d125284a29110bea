"""The chunked nucleus (trainer/nucleus.py) equals the full-logits path of trainer/rl.py — values,
the inside mask and gradients — for chunks smaller than the positions, and runs on a vocabulary
larger than 32,768; the bit-packed mask round-trips."""

from __future__ import annotations

import pytest
import torch

from trainer import rl
from trainer.nucleus import nucleus_logprobs, pack_mask, unpack_mask


def _setup(n: int, vocab: int, d: int = 16, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    head = torch.nn.Linear(d, vocab, bias=False)
    with torch.no_grad():
        head.weight.copy_(torch.randn(vocab, d, generator=g) * 0.5)
    hidden = torch.randn(n, d, generator=g)
    targets = torch.randint(0, vocab, (n,), generator=g)
    temp = torch.rand(n, generator=g) + 0.5
    top_p = torch.where(torch.arange(n) % 3 == 0, torch.ones(n), torch.full((n,), 0.6))
    return head, hidden, targets, temp, top_p


def _full(head, hidden, targets, temp, top_p):
    """The unchunked path: full logits, rl.nucleus_keep and rl.truncated_logprobs."""
    logits = head(hidden).float().unsqueeze(0)  # (1, N, V): one row, N positions
    keep = torch.cat([rl.nucleus_keep(logits[:, i:i + 1], temp[i:i + 1], top_p[i:i + 1])
                      for i in range(hidden.shape[0])], dim=1)
    scaled = logits / temp.view(1, -1, 1)  # per-position temperature
    scaled = scaled.masked_fill(~keep, float("-inf"))
    logp = torch.log_softmax(scaled, -1).gather(-1, targets.view(1, -1, 1)).view(-1)
    inside = torch.isfinite(logp)
    return torch.where(inside, logp, torch.zeros_like(logp)), inside, keep[0]


@pytest.mark.parametrize("vocab", [97, 40_000])
def test_chunked_equals_the_full_logits_path(vocab):
    n = 50 if vocab < 1000 else 24
    head, hidden, targets, temp, top_p = _setup(n, vocab)
    # targets inside the nucleus for most positions: the argmax token
    targets = torch.where(torch.arange(n) % 4 == 0, targets, head(hidden).argmax(-1))
    want_lp, want_in, want_keep = _full(head, hidden, targets, temp, top_p)
    lp, inside, packed = nucleus_logprobs(hidden, head, targets, temp, top_p=top_p, chunk=7)
    assert torch.equal(unpack_mask(packed, vocab), want_keep)
    assert torch.equal(inside, want_in) and not inside.all() and inside.any()
    torch.testing.assert_close(lp, want_lp, rtol=1e-5, atol=1e-5)
    # the policy's pass: reuse the packed nucleus, with gradients through checkpointed chunks
    h = hidden.clone().requires_grad_(True)
    lp2, inside2, _ = nucleus_logprobs(h, head, targets, temp, packed=packed, chunk=5)
    lp2.sum().backward()
    h_ref = hidden.clone().requires_grad_(True)
    _full(head, h_ref, targets, temp, top_p)[0].sum().backward()
    assert torch.equal(inside2, want_in)
    torch.testing.assert_close(lp2, want_lp, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(h.grad, h_ref.grad, rtol=1e-4, atol=1e-5)


def test_the_packed_mask_round_trips_and_is_v_over_8_bytes():
    mask = torch.rand(5, 49_152) < 0.3
    packed = pack_mask(mask)
    assert packed.dtype == torch.uint8 and packed.shape == (5, 6_144)
    assert torch.equal(unpack_mask(packed, 49_152), mask)
    odd = torch.rand(3, 13) < 0.5
    assert torch.equal(unpack_mask(pack_mask(odd), 13), odd)


def test_exactly_one_of_top_p_and_packed():
    head, hidden, targets, temp, top_p = _setup(4, 11)
    with pytest.raises(ValueError, match="exactly one"):
        nucleus_logprobs(hidden, head, targets, temp)

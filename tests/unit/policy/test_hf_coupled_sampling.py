"""Coupled sampling (``per_row=True``): a row's samples depend on its own logits and its own
seeded stream, not on the other rows of the batch or when they finish, so the gate's common random
numbers hold between two models whose answers end at different steps."""

import pytest
import torch

from policy.hf_generate import race, row_generators

PROMPTS = ["def add(a, b):", "x = 1\ny =", "# sort a list\ndef sort_list(xs):\n    return",
           "class Stack:", "import os\n", "for i in range(3):"]


def _ends_early(text: str) -> bool:
    return len(text) >= 6


def _ends_late(text: str) -> bool:
    return len(text) >= 12


def test_the_race_by_hand():
    logp = torch.tensor([[0.2, 0.0, 0.5, 0.3]]).log()
    # p / E: 0.2/0.1 = 2.0 beats 0.5/0.5 = 1.0 and 0.3/1.0; token 1 (p = 0) never wins
    assert race(logp, torch.tensor([[0.1, 1e-9, 0.5, 1.0]])).tolist() == [0]
    assert race(logp, torch.tensor([[1.0, 1e-9, 0.2, 0.2]])).tolist() == [2]  # 2.5 vs 1.5
    assert race(logp, torch.tensor([[1.0, 1e-9, 1.0, 0.1]])).tolist() == [3]  # 3.0


def test_the_race_draws_the_distribution_and_never_a_zero_token():
    probs = torch.tensor([0.1, 0.0, 0.6, 0.0, 0.3])
    e = torch.empty(20_000, 5).exponential_(generator=torch.Generator().manual_seed(0))
    drawn = race(probs.log().expand(len(e), -1), e)
    share = torch.bincount(drawn, minlength=5).float() / len(e)
    assert share[1] == 0 and share[3] == 0
    assert share.tolist() == pytest.approx(probs.tolist(), abs=0.01)


def test_a_row_stream_does_not_depend_on_the_batch_size():
    def first(gens):
        return torch.empty(8).exponential_(generator=gens[1])

    assert torch.equal(first(row_generators(7, 5)), first(row_generators(7, 2)))
    assert not torch.equal(first(row_generators(7, 2)), first(row_generators(8, 2)))
    with pytest.raises(ValueError, match="seed"):
        row_generators(None, 2)


@pytest.mark.parametrize(("family", "spec"), [("llama", {"experts": 0}), ("mixtral", {})])
def test_a_row_samples_the_same_whatever_else_is_in_the_batch(tiny_hf, family, spec):
    policy = tiny_hf(family, **spec)
    ids = [policy.encode_prompt(p) for p in PROMPTS]

    def first_row(others: list[list[int]], **kw) -> list[int]:
        # the other rows are other prompts, so they stop at other steps
        gens = policy.generate([ids[0], *others], max_new_tokens=20, temperature=1.0, seed=3,
                               stop_when=_ends_early, **kw)
        return gens[0].token_ids

    with_rows = [ids[1:3], ids[3:6], [ids[5], ids[2]]]
    coupled = [first_row(o, per_row=True) for o in with_rows]
    assert coupled[0] == coupled[1] == coupled[2]
    # one shared generator: the same seed, other rows beside it, another sample for row 0
    shared = [first_row(o) for o in with_rows]
    assert len({tuple(s) for s in shared}) > 1


def test_coupled_samples_agree_more_between_two_close_models(tiny_hf):
    """A small weight move of the model: with one shared generator the two models' rows drift
    apart once any row ends at another step in one of them (every later row's draws shift);
    coupled, most rows stay the same answer."""
    import copy

    base = tiny_hf("llama", experts=0)
    moved = copy.deepcopy(base)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in moved.module.parameters():
            if p.numel() > 1:
                p.add_(0.1 * p.std() * torch.randn(p.shape, generator=gen))
    ids = [base.encode_prompt(p) for p in PROMPTS] * 8

    def same_rows(seed: int, **kw) -> int:
        a, b = (m.generate(ids, max_new_tokens=24, temperature=1.0, seed=seed,
                           stop_when=_ends_late, **kw) for m in (base, moved))
        return sum(x.token_ids == y.token_ids for x, y in zip(a, b, strict=True))

    coupled = sum(same_rows(s, per_row=True) for s in range(2))
    shared = sum(same_rows(s) for s in range(2))
    assert coupled >= 0.7 * 2 * len(ids)
    assert coupled > 2 * shared


"""The prompt-conditioned value baseline removes the prompt-difficulty part of the advantage."""

import torch
from torch import nn

from trainer.baselines import ValueBaseline, capture_final_hidden, prompt_features


def _prompts(n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Features (n, 8) whose first coordinate is the prompt's easiness d ~ N(0, 1); reward +1
    with probability sigmoid(2 d), else -1, so E[R | d] = tanh(d) and Var(R) ~ 1 while
    E[Var(R | d)] = 1 - E[tanh(d)^2] ~ 0.61."""
    x = torch.randn(n, 8, generator=gen)
    p = torch.sigmoid(2 * x[:, 0])
    r = torch.where(torch.rand(n, generator=gen) < p, 1.0, -1.0)
    return x, r


def test_value_head_reduces_advantage_variance_on_prompt_difficulty():
    gen = torch.Generator().manual_seed(0)
    value = ValueBaseline(8, hidden=0, lr=1e-2, steps=4, seed=0)
    for _ in range(150):  # one pass of 150 batches of 64 rows, a few steps per batch
        x, r = _prompts(64, gen)
        value.fit(x, r)
    x, r = _prompts(4000, gen)
    var_mean = float((r - r.mean()).var())  # the kind's mean as baseline
    var_value = float((r - value.predict(x)).var())
    # best linear fit of tanh(d) on d explains ~0.36 of ~1.0 (hand: E[d tanh d]^2 ~ 0.6^2)
    assert var_value < 0.75 * var_mean, (var_value, var_mean)


def test_value_head_is_unbiased_where_reward_does_not_depend_on_the_prompt():
    gen = torch.Generator().manual_seed(1)
    value = ValueBaseline(8, hidden=16, lr=1e-2, steps=4, seed=0)
    for _ in range(100):
        x = torch.randn(64, 8, generator=gen)
        value.fit(x, torch.full((64,), 0.3))
    assert torch.allclose(value.predict(torch.randn(256, 8, generator=gen)),
                          torch.full((256,), 0.3), atol=0.05)


def test_prompt_features_mean_pool_the_prompt_positions_of_lm_head_input():
    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(5, 2)
            self.lm_head = nn.Linear(2, 5)

        def forward(self, tokens):
            return self.lm_head(self.emb(tokens))

    model = Tiny()
    with torch.no_grad():
        model.emb.weight.copy_(torch.arange(10.0).view(5, 2))  # token t -> (2t, 2t + 1)
    with capture_final_hidden(model) as store:
        model(torch.tensor([[1, 3, 4]]))
    # prompt = first two positions: mean of (2, 3) and (6, 7) = (4, 5)
    feats = prompt_features(store["hidden"], torch.tensor([[True, True, False]]))
    assert feats.tolist() == [[4.0, 5.0]] and not feats.requires_grad
    assert not model.lm_head._forward_pre_hooks  # the hook is removed afterwards

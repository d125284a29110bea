"""The off-policy correction matters: rows logged by an older checkpoint, trained with and without
the importance weight pi_champion / pi_behaviour.

A one-token "completion" (a three-armed bandit) through the real objective
(``rl.token_clip_loss``). The champion already prefers the best answer (arm 2); the rows were
logged by an older checkpoint that mostly gave arm 1. Treating those rows as if the champion had
sampled them reinforces the old checkpoint's favourite and takes mass from the best answer; the
corrected objective moves towards the best answer.
"""

import torch

from trainer import rl

REWARD = torch.tensor([0.4, 0.7, 0.9])
CHAMPION = torch.tensor([0.1, 0.2, 0.7])
OLD_CHECKPOINT = torch.tensor([0.1, 0.85, 0.05])
ROWS, STEPS = 4000, 60


def _logged_rows() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    arms = torch.multinomial(OLD_CHECKPOINT, ROWS, replacement=True, generator=gen)
    return arms, OLD_CHECKPOINT.log()[arms].unsqueeze(1)  # the logged behaviour logprobs


def _train(corrected: bool) -> torch.Tensor:
    arms, logp_logged = _logged_rows()
    rewards = REWARD[arms]
    adv = rewards - rewards.mean()  # a batch-mean baseline, as for a prompt's group
    theta = CHAMPION.log().clone().requires_grad_(True)
    logp_prox = torch.log_softmax(theta.detach(), 0)[arms].unsqueeze(1)
    logp_b = logp_logged if corrected else logp_prox  # uncorrected: "the champion sampled these"
    opt = torch.optim.SGD([theta], lr=1.0)
    mask = torch.ones(ROWS, 1, dtype=torch.bool)
    for _ in range(STEPS):
        logp = torch.log_softmax(theta, 0)[arms].unsqueeze(1)
        loss, _ = rl.token_clip_loss(logp, logp_b, adv, mask, eps_low=0.2, eps_high=0.28,
                                     is_cap=2.0, logp_prox=logp_prox)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return torch.softmax(theta.detach(), 0)


def test_correction_improves_where_the_uncorrected_update_stalls():
    before = float(CHAMPION @ REWARD)
    corrected, uncorrected = _train(corrected=True), _train(corrected=False)
    gain_corrected = float(corrected @ REWARD) - before
    gain_uncorrected = float(uncorrected @ REWARD) - before
    assert gain_corrected > 0.02
    assert abs(gain_uncorrected) < 0.005
    assert gain_corrected > 5 * abs(gain_uncorrected)
    assert corrected[2] > CHAMPION[2] > uncorrected[2]  # best answer: up vs down
    assert uncorrected[1] > CHAMPION[1]  # the old checkpoint's favourite is reinforced


def test_fresh_rows_need_no_weight():
    """When the champion logged the rows itself, corrected and uncorrected are the same loss."""
    arms = torch.tensor([0, 1, 2, 2])
    logp = torch.log_softmax(CHAMPION.log(), 0)[arms].unsqueeze(1).requires_grad_(True)
    adv = torch.tensor([-0.5, 0.0, 0.5, 0.5])
    mask = torch.ones(4, 1, dtype=torch.bool)
    kw = dict(eps_low=0.2, eps_high=0.28, is_cap=2.0, logp_prox=logp.detach())
    a, m = rl.token_clip_loss(logp, logp.detach(), adv, mask, **kw)
    b, _ = rl.token_clip_loss(logp, logp.detach().clone(), adv, mask, **kw)
    assert a.item() == b.item() and m["is_weight_mean"] == 1.0


def test_importance_weight_is_truncated_at_cap():
    logp_prox = torch.tensor([[0.0], [0.0]])  # pi_prox = 1
    logp_b = torch.tensor([[-3.0], [-0.1]])  # pi_prox / pi_b = e^3 (> C = 2) and e^0.1
    logp = logp_prox.clone().requires_grad_(True)
    loss, m = rl.token_clip_loss(logp, logp_b, torch.tensor([1.0, 1.0]), torch.ones(2, 1),
                                 eps_low=0.2, eps_high=0.28, is_cap=2.0, logp_prox=logp_prox)
    loss.backward()
    expected = -torch.tensor([[2.0], [torch.e ** 0.1]]) / 2  # -w * A * rho / N, rho = 1
    assert torch.allclose(logp.grad, expected)
    assert m["is_weight_truncated_frac"] == 0.5

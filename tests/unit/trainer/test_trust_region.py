"""Which bound each objective gives: token_clip around the champion stops pushing a token once it
leaves the trust region, CISPO does not; ``kl_budget`` ends an update early."""

import math

import pyarrow as pa
import pytest
import torch

from policy.toy.checkpoint import save_checkpoint
from tasks.toy import generate_tasks
from trainer import rl
from trainer.config import TrainerConfig
from trainer.recipe import RLRecipe
from trainer.rollout import sample_rows

EPS = 0.2


def _one_token(loss_fn, logp_value: float, prox_value: float):
    logp = torch.tensor([[logp_value]], requires_grad=True)
    prox = torch.tensor([[prox_value]])
    loss, _ = loss_fn(logp, prox, torch.tensor([1.0]), torch.ones(1, 1), eps_low=EPS,
                      eps_high=EPS, is_cap=2.0, logp_prox=prox)
    loss.backward()
    return float(logp.grad)


@pytest.mark.parametrize(("ratio", "token_clip_grad", "cispo_grad"), [
    (1.1, -1.1, -1.1),   # inside: d(-rho * A)/d logp = -rho; CISPO: -clip(rho) * A = -1.1
    (1.5, 0.0, -1.2),    # past 1 + eps: token_clip's clipped branch is constant, CISPO pushes
])
def test_gradient_of_one_token_by_hand(ratio, token_clip_grad, cispo_grad):
    prox = math.log(0.4)
    logp = prox + math.log(ratio)
    assert _one_token(rl.token_clip_loss, logp, prox) == pytest.approx(token_clip_grad, abs=1e-6)
    assert _one_token(rl.cispo_loss, logp, prox) == pytest.approx(cispo_grad, abs=1e-6)


def _train_two_token_policy(loss_fn, steps: int) -> float:
    """A policy over two tokens, its logits trained by SGD on one logged token with advantage
    +1, the champion (and behaviour) at p = 0.3; returns pi_theta / pi_champion at the end."""
    champion = torch.log_softmax(torch.tensor([math.log(0.3), math.log(0.7)]), 0)
    logits = champion.clone().requires_grad_(True)
    opt = torch.optim.SGD([logits], lr=0.5)
    for _ in range(steps):
        logp = torch.log_softmax(logits, 0)[0].view(1, 1)
        loss, _ = loss_fn(logp, champion[0].view(1, 1), torch.tensor([1.0]), torch.ones(1, 1),
                          eps_low=EPS, eps_high=EPS, is_cap=2.0,
                          logp_prox=champion[0].view(1, 1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return float((torch.log_softmax(logits.detach(), 0)[0] - champion[0]).exp())


def test_token_clip_around_the_champion_bounds_the_whole_update_cispo_does_not():
    clipped = _train_two_token_policy(rl.token_clip_loss, steps=50)
    pushed = _train_two_token_policy(rl.cispo_loss, steps=50)
    # one SGD step from inside the region can overshoot it, never a second one
    one_step = _train_two_token_policy(rl.token_clip_loss, steps=1)
    assert clipped <= max(1 + EPS, one_step) + 1e-6
    assert pushed > 2.5  # p -> 1: 1 / 0.3 = 3.33 is the ceiling


@pytest.fixture
def sampled_rows(tiny_model):
    rows = sample_rows(tiny_model, generate_tasks(8, seed=0, split="train"), samples_per_task=1,
                       model_version=1, seed=0, max_new_tokens=6, temperature=1.0)
    rewards = [1.0 if i % 2 else -1.0 for i in range(rows.num_rows)]
    return rows.set_column(rows.schema.get_field_index("reward"), "reward",
                           pa.array(rewards, pa.float64()))


@pytest.mark.parametrize(("budget", "steps_done"), [(None, 6), (1e-9, None)])
def test_kl_budget_ends_the_update(tiny_model, sampled_rows, tmp_path, budget, steps_done):
    champion = save_checkpoint(tiny_model, tmp_path / "champion", metadata={"model_version": 1})
    recipe = RLRecipe(champion, sampled_rows, TrainerConfig(
        steps=6, batch_size=8, lr=5e-2, kl_coef=0.0, anchor_kl_coef=0.0, kl_budget=budget))
    recipe.setup()
    m = recipe.train()
    if steps_done is not None:
        assert m["steps_done"] == steps_done and m["kl_budget_stopped"] == 0.0
    else:  # the first step starts at the champion (KL 0); it stops once the KL is measurable
        assert 2 <= m["steps_done"] < 6 and m["kl_budget_stopped"] == 1.0
        assert m["kl_theta_ref_k3"] > budget

"""The objective arms beside token_clip: filtered_imitation (positives only, importance-weighted,
inside the champion's trust region) and asymmetric (token_clip with negative advantages scaled
down). Gradients by autograd against gradients written out by hand from the formulas; then a
few training steps with each, on the toy and on a tiny Hugging Face model."""

import math

import pyarrow as pa
import pytest
import torch

from policy.toy.checkpoint import load_metadata, save_checkpoint
from tasks.toy import generate_tasks
from trainer import rl
from trainer.config import TrainerConfig
from trainer.recipe import NoTrainableRows, RLRecipe
from trainer.rollout import sample_rows

LN = math.log

# Two rows x 3 tokens. Row 0 is rewarded (1.0 > 0), row 1 is not (-1.0).
# pi_b: the logged behaviour probability; pi_prox: the champion's; pi_theta: the policy's.
PI_B = [[0.5, 0.2, 0.3], [0.4, 0.4, 0.4]]
PI_PROX = [[0.4, 0.5, 0.3], [0.4, 0.4, 0.4]]
PI_THETA = [[0.44, 0.5, 0.45], [0.2, 0.6, 0.4]]
REWARDS = torch.tensor([1.0, -1.0])


def _imitation(pi_theta, *, kl_coef=0.0, anchor_kl_coef=0.0, mask=None):
    logp = torch.log(torch.tensor(pi_theta)).requires_grad_(True)
    prox = torch.log(torch.tensor(PI_PROX))
    loss, metrics = rl.filtered_imitation_loss(
        logp, torch.log(torch.tensor(PI_B)), REWARDS,
        torch.ones(2, 3) if mask is None else mask, min_reward=0.0, eps_low=0.2,
        eps_high=0.2, is_cap=2.0, logp_prox=prox, logp_ref=prox, kl_coef=kl_coef,
        logp_anchor=prox - 0.1, anchor_kl_coef=anchor_kl_coef)
    loss.backward()
    return logp.grad, loss, metrics


def test_filtered_imitation_gradient_by_hand():
    """d loss / d log pi_theta(y_t) = -w_t * rho_t / N on the rewarded row's tokens, where
    w_t = min(pi_prox / pi_b, C), rho_t = pi_theta / pi_prox and N = 3 (its tokens): the
    gradient of the token-mean NLL weighted by w_t * rho_t = pi_theta / pi_b (w untruncated).
    Token 2 has rho = 1.5 > 1 + eps = 1.2: clipped, no gradient."""
    grad, _, m = _imitation(PI_THETA)
    w = [0.4 / 0.5, min(0.5 / 0.2, 2.0), 0.3 / 0.3]   # [0.8, 2.0 (capped), 1.0]
    rho = [0.44 / 0.4, 0.5 / 0.5, 0.45 / 0.3]          # [1.1, 1.0, 1.5]
    expected_row0 = [-w[0] * rho[0] / 3, -w[1] * rho[1] / 3, 0.0]
    assert grad[0].tolist() == pytest.approx(expected_row0, abs=1e-6)
    assert grad[1].tolist() == [0.0, 0.0, 0.0]
    assert m["imitated_rows"] == 1.0 and m["clip_frac"] == pytest.approx(1 / 3)


def test_filtered_imitation_row_below_threshold_contributes_exactly_zero():
    """With the KL penalties on, the unrewarded row still gets no gradient, and what it holds
    (its probabilities, or whether it is there at all) leaves the rewarded row's gradient as it
    was: it is not in the token mean."""
    base, _, _ = _imitation(PI_THETA, kl_coef=0.5, anchor_kl_coef=0.5)
    assert base[1].tolist() == [0.0, 0.0, 0.0]
    moved, _, _ = _imitation([PI_THETA[0], [0.9, 0.05, 0.01]], kl_coef=0.5, anchor_kl_coef=0.5)
    assert torch.equal(moved, base)
    masked_out, _, _ = _imitation(PI_THETA, kl_coef=0.5, anchor_kl_coef=0.5,
                                  mask=torch.tensor([[1.0, 1, 1], [0, 0, 0]]))
    assert torch.equal(masked_out, base)


def test_filtered_imitation_clipped_token_contributes_zero():
    """Pushing the clipped token further past the trust region changes nothing for anyone; a
    token below 1 - eps is not clipped (the rewarded row only pushes probabilities up)."""
    a, _, _ = _imitation(PI_THETA)
    b, _, _ = _imitation([[0.44, 0.5, 0.9], PI_THETA[1]])
    assert float(a[0, 2]) == 0.0 and torch.equal(a, b)
    low, _, _ = _imitation([[0.44, 0.5, 0.15], PI_THETA[1]])  # rho = 0.5 < 0.8
    assert float(low[0, 2]) == pytest.approx(-1.0 * 0.5 / 3, abs=1e-6)


def test_filtered_imitation_with_nothing_rewarded_is_zero():
    logp = torch.log(torch.tensor(PI_THETA)).requires_grad_(True)
    loss, m = rl.filtered_imitation_loss(logp, logp.detach(), torch.tensor([-1.0, 0.0]),
                                         torch.ones(2, 3), min_reward=0.0, eps_low=0.2,
                                         eps_high=0.2, is_cap=2.0)
    loss.backward()
    assert float(loss.detach()) == 0.0 and float(logp.grad.abs().sum()) == 0.0
    assert m["imitated_rows"] == 0.0


def test_asymmetric_gradient_by_hand_through_the_logits():
    """2 rows x 3 tokens of logits over 4 tokens. A = [+1, -2], negative_scale 0.25: A' = [1,
    -0.5]. Per token: g_t = d loss / d log pi_theta(y_t) = -w_t * rho_t * A'_i / N (N = 6) unless
    clipped (rho > 1 + eps_high with A > 0, rho < 1 - eps_low with A < 0, or rho > c with
    A < 0: then 0); and d loss / d z_tv = g_t * (1[v = y_t] - softmax(z_t)_v)."""
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, 4, generator=gen).requires_grad_(True)
    y = torch.tensor([[0, 3, 1], [2, 2, 0]])
    logp = torch.log_softmax(logits, -1).gather(-1, y.unsqueeze(-1)).squeeze(-1)
    rho = torch.tensor([[1.0, 1.1, 1.5], [0.7, 1.0, 3.5]])
    w = torch.tensor([[1.0, 0.5, 1.0], [1.5, 2.5, 1.0]])
    prox = logp.detach() - rho.log()
    logp_b = prox - w.log()
    loss, _ = rl.asymmetric_loss(logp, logp_b, torch.tensor([1.0, -2.0]), torch.ones(2, 3),
                                 negative_scale=0.25, eps_low=0.2, eps_high=0.28, is_cap=2.0,
                                 dual_clip_c=3.0, logp_prox=prox)
    loss.backward()
    g = torch.tensor([
        [-1.0 * 1.0 * 1.0 / 6, -0.5 * 1.1 * 1.0 / 6, 0.0],   # token 2: 1.5 > 1.28, A > 0
        [0.0, -2.0 * 1.0 * -0.5 / 6, 0.0],                     # 0.7 < 0.8; w capped at 2; 3.5 > c
    ])
    onehot = torch.nn.functional.one_hot(y, 4).float()
    expected = g.unsqueeze(-1) * (onehot - torch.softmax(logits.detach(), -1))
    assert torch.allclose(logits.grad, expected, atol=1e-6)


def test_asymmetric_with_negative_scale_one_is_token_clip():
    gen = torch.Generator().manual_seed(1)
    base = torch.randn(3, 4, generator=gen) - 2.0
    adv = torch.tensor([1.0, -0.7, -2.0])
    kw = dict(eps_low=0.2, eps_high=0.28, is_cap=2.0, dual_clip_c=3.0,
              logp_prox=base - 0.1 * torch.randn(3, 4, generator=gen), logp_ref=base,
              kl_coef=0.1, logp_anchor=base + 0.05, anchor_kl_coef=0.2)
    logp_b = base + 0.2 * torch.randn(3, 4, generator=gen)
    mask = torch.tensor([[1.0, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]])
    grads, losses = [], []
    for fn, extra in ((rl.token_clip_loss, {}), (rl.asymmetric_loss, {"negative_scale": 1.0})):
        logp = base.clone().requires_grad_(True)
        loss, _ = fn(logp, logp_b, adv, mask, **kw, **extra)
        loss.backward()
        grads.append(logp.grad)
        losses.append(float(loss.detach()))
    assert losses[0] == losses[1] and torch.equal(grads[0], grads[1])


def test_objective_configs_bounds():
    cfg = TrainerConfig(objective={"type": "asymmetric"})
    assert cfg.objective.negative_scale == 0.25
    for bad in (0.05, 0.5):
        with pytest.raises(ValueError, match="negative_scale"):
            TrainerConfig(objective={"type": "asymmetric", "negative_scale": bad})
    with pytest.raises(ValueError, match="neg_adv_scale"):
        TrainerConfig(objective={"type": "asymmetric"}, neg_adv_scale=0.5)
    assert TrainerConfig(objective={"type": "filtered_imitation"}).objective.min_reward == 0.0


# -- a few training steps with each arm ------------------------------------------------------

@pytest.fixture
def rewarded_rows(tiny_model):
    rows = sample_rows(tiny_model, generate_tasks(8, seed=0, split="train"), samples_per_task=1,
                       model_version=1, seed=0, max_new_tokens=6, temperature=1.0)
    rewards = [1.0 if i % 2 else -1.0 for i in range(rows.num_rows)]
    return rows.set_column(rows.schema.get_field_index("reward"), "reward",
                           pa.array(rewards, pa.float64()))


def _mean_logp(recipe: RLRecipe, idx: list[int]) -> float:
    from trainer.recipe import policy_logprobs

    batch = recipe._collate([recipe.samples[i] for i in idx])
    with torch.no_grad():
        logp, _ = policy_logprobs(recipe.plug, batch, replay=True, replay_min_ratio=0.1)
    return float(rl.masked_mean(logp, batch.resp_mask))


@pytest.mark.parametrize("objective", [{"type": "filtered_imitation"}, {"type": "asymmetric"}])
def test_a_few_toy_steps_change_the_weights(tiny_model, rewarded_rows, tmp_path, objective):
    champion = save_checkpoint(tiny_model, tmp_path / "champion", metadata={"model_version": 1})
    recipe = RLRecipe(champion, rewarded_rows, TrainerConfig(
        steps=4, batch_size=8, lr=1e-2, objective=objective))
    recipe.setup()
    rewarded = [i for i, s in enumerate(recipe.samples) if s.reward > 0]
    before_params = [p.detach().clone() for p in recipe.policy.parameters()]
    before = _mean_logp(recipe, rewarded)
    m = recipe.train()
    assert m["steps_done"] == 4 and math.isfinite(m["loss"])
    assert any(not torch.equal(a, p) for a, p in zip(before_params, recipe.policy.parameters()))
    # both push the rewarded rows up (filtered_imitation only them)
    assert _mean_logp(recipe, rewarded) > before
    recipe.save_checkpoint(tmp_path / "cand")
    assert load_metadata(tmp_path / "cand")["trainer_config"]["objective"]["type"] == \
        objective["type"]


def test_filtered_imitation_with_no_rewarded_row_has_no_trainable_rows(tiny_model, rewarded_rows,
                                                                        tmp_path):
    champion = save_checkpoint(tiny_model, tmp_path / "champion", metadata={"model_version": 1})
    recipe = RLRecipe(champion, rewarded_rows, TrainerConfig(
        steps=1, objective={"type": "filtered_imitation", "min_reward": 1.0}))
    with pytest.raises(NoTrainableRows, match="filtered_imitation"):
        recipe.setup()


def test_both_arms_train_a_hugging_face_policy(tmp_path):
    from policy.config import HFPolicyConfig, TinyHFSpec
    from policy.loader import load_policy
    from trainer.rollout import policy_rows

    champion = load_policy(HFPolicyConfig(build=TinyHFSpec(family="mixtral", layers=2, hidden=32,
                                                           heads=2, kv_heads=1)),
                           workdir=tmp_path / "build")
    champion.save(tmp_path / "champion", metadata={"model_version": 1})
    rows = policy_rows(champion, generate_tasks(4, seed=0, split="train"), samples=1,
                       temperature=1.0, seed=0)
    rows = rows.set_column(rows.schema.get_field_index("reward"), "reward",
                           pa.array([1.0, -1.0] * (rows.num_rows // 2)))
    for objective in ("filtered_imitation", "asymmetric"):
        recipe = RLRecipe(tmp_path / "champion", rows, TrainerConfig(
            steps=2, batch_size=4, lr=1e-2, objective={"type": objective}))
        recipe.setup()
        before = [p.detach().clone() for p in recipe.policy.parameters()]
        try:
            m = recipe.train()
            assert m["steps_done"] == 2 and math.isfinite(m["loss"]), objective
            assert any(not torch.equal(a, p)
                       for a, p in zip(before, recipe.policy.parameters())), objective
        finally:
            recipe.cleanup()

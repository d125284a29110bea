"""Hand-computed cases for the off-policy losses in trainer/rl.py."""

import math

import pytest
import torch

from trainer import rl

KW = dict(eps_low=0.2, eps_high=0.2, is_cap=2.0)


def _leaf(values):
    return torch.tensor(values, dtype=torch.float32, requires_grad=True)


def test_ratio_one_is_plain_policy_gradient():
    logp = _leaf([[-1.0, -2.0], [-0.5, -0.7]])
    adv = torch.tensor([1.0, -2.0])
    mask = torch.ones(2, 2, dtype=torch.bool)
    loss, m = rl.token_clip_loss(logp, logp.detach().clone(), adv, mask, **KW)
    assert loss.item() == pytest.approx(-(1 + 1 - 2 - 2) / 4)
    loss.backward()
    # d loss / d logp_t = -A_t / N  (ratio = 1 so d ratio = d logp)
    assert torch.allclose(logp.grad, torch.tensor([[-0.25, -0.25], [0.5, 0.5]]))
    assert m["clip_frac"] == 0 and m["ratio_mean"] == pytest.approx(1.0)


def test_clip_engages_on_both_sides():
    logp_b = torch.zeros(2, 1)
    logp = _leaf([[math.log(1.5)], [math.log(0.5)]])
    adv = torch.tensor([1.0, -1.0])
    loss, m = rl.token_clip_loss(logp, logp_b, adv, torch.ones(2, 1), **KW)
    # A>0: min(1.5, 1.2) = 1.2 ; A<0: min(-0.5, -0.8) = -0.8 -> loss = -(1.2 - 0.8) / 2
    assert loss.item() == pytest.approx(-0.2)
    loss.backward()
    assert torch.all(logp.grad == 0)
    assert m["clip_frac"] == 1.0


def test_inside_clip_range_keeps_gradient():
    logp = _leaf([[math.log(1.1)]])
    loss, m = rl.token_clip_loss(logp, torch.zeros(1, 1), torch.tensor([1.0]), torch.ones(1, 1),
                                 **KW)
    loss.backward()
    assert logp.grad.item() == pytest.approx(-1.1)  # -A * ratio
    assert m["clip_frac"] == 0


def test_dual_clip_bounds_a_negative_advantage_at_its_own_constant():
    logp = _leaf([[math.log(3.0)]])  # ratio 3 > c = 2 with a negative advantage
    loss, m = rl.token_clip_loss(logp, torch.zeros(1, 1), torch.tensor([-1.0]), torch.ones(1, 1),
                                 dual_clip_c=2.0, **KW)
    assert loss.item() == pytest.approx(2.0)  # -min(min(3, 2) * -1, 1.2 * -1)
    loss.backward()
    assert logp.grad.item() == 0
    assert m["dual_clip_frac"] == 1.0 and m["ratio_max"] == pytest.approx(3.0)


def test_dual_clip_constant_is_separate_from_the_is_cap():
    # ratio 2.5, A = -1, IS cap C = 2 (pi_prox = pi_b: w = 1). Dual clip c = 3: the ratio is
    # below c, so the term is min(2.5 * -1, 1.2 * -1) = -2.5 and the gradient flows:
    # d(-(-rho)) / d logp = rho = 2.5. Today's code used C = 2 as c: loss 2.0, gradient 0.
    logp = _leaf([[math.log(2.5)]])
    loss, m = rl.token_clip_loss(logp, torch.zeros(1, 1), torch.tensor([-1.0]), torch.ones(1, 1),
                                 dual_clip_c=3.0, **KW)
    assert loss.item() == pytest.approx(2.5)
    loss.backward()
    assert logp.grad.item() == pytest.approx(2.5)
    assert m["dual_clip_frac"] == 0.0
    # with c = 2.2 < 2.5 it clips at c: loss = 2.2, no gradient, whatever the IS cap
    logp2 = _leaf([[math.log(2.5)]])
    loss2, _ = rl.token_clip_loss(logp2, torch.zeros(1, 1), torch.tensor([-1.0]),
                                  torch.ones(1, 1), eps_low=0.2, eps_high=0.2, is_cap=10.0,
                                  dual_clip_c=2.2)
    loss2.backward()
    assert loss2.item() == pytest.approx(2.2) and logp2.grad.item() == 0


def test_mask_excludes_padding():
    logp = _leaf([[-1.0, -1.0]])
    mask = torch.tensor([[True, False]])
    loss, _ = rl.token_clip_loss(logp, logp.detach(), torch.tensor([1.0]), mask, **KW)
    loss.backward()
    assert logp.grad[0, 1] == 0 and logp.grad[0, 0] == pytest.approx(-1.0)


def test_kl_zero_when_policy_is_reference():
    logp = _leaf([[-1.0, -3.0]])
    args = (logp, logp.detach(), torch.tensor([0.5]), torch.ones(1, 2))
    with_kl, m = rl.token_clip_loss(*args, logp_ref=logp.detach(), kl_coef=0.5, **KW)
    without, _ = rl.token_clip_loss(*args, **KW)
    assert m["kl_theta_ref_k3"] == 0.0
    assert with_kl.item() == pytest.approx(without.item())


def test_kl_penalty_lowers_advantage_where_policy_exceeds_reference():
    logp = _leaf([[-1.0]])
    ref = torch.tensor([[-2.0]])  # k1 = 1
    loss, m = rl.token_clip_loss(logp, logp.detach(), torch.tensor([0.0]), torch.ones(1, 1),
                                 logp_ref=ref, kl_coef=0.1, **KW)
    # k3 with r = pi_ref / pi_theta = e^-1 and weight pi_theta / pi_b = 1: e^-1 - 1 + 1
    assert m["kl_theta_ref_k3"] == pytest.approx(math.exp(-1.0))
    loss.backward()
    assert logp.grad.item() == pytest.approx(0.1)  # descent lowers logp toward the reference


def test_row_weight_scales_rows():
    logp = _leaf([[-1.0], [-1.0]])
    loss, _ = rl.token_clip_loss(logp, logp.detach(), torch.tensor([1.0, 1.0]), torch.ones(2, 1),
                                 row_weight=torch.tensor([1.0, 0.0]), **KW)
    loss.backward()
    assert logp.grad[1, 0] == 0 and logp.grad[0, 0] == pytest.approx(-0.5)


GSPO = dict(eps_low=0.2, eps_high=0.2, band_low=0.5, band_high=2.0, is_cap=4.0)


def test_gspo_sequence_ratio_is_geometric_mean():
    logp_b = torch.zeros(1, 2)
    logp = _leaf([[math.log(1.21), 0.0]])  # token ratios 1.21, 1 -> s = 1.1
    loss, m = rl.gspo_loss(logp, logp_b, torch.tensor([1.0]), torch.ones(1, 2), **GSPO)
    assert m["ratio_mean"] == pytest.approx(1.1)
    assert loss.item() == pytest.approx(-1.1)  # token mean of s * A over 2 tokens
    loss.backward()
    # d s / d logp_t = s / |y| for every token
    assert torch.allclose(logp.grad, torch.full((1, 2), -1.1 / 2))


def test_gspo_band_masks_sequences_whose_behaviour_is_far_from_prox():
    # pi_prox / pi_b = 3 for row 0 (outside [0.5, 2]), 1 for row 1. pi_theta = pi_prox: s = 1.
    logp_b = torch.tensor([[-math.log(3.0)], [0.0]])
    logp_prox = torch.zeros(2, 1)
    logp = _leaf([[0.0], [0.0]])
    loss, m = rl.gspo_loss(logp, logp_b, torch.tensor([1.0, 1.0]), torch.ones(2, 1),
                           logp_prox=logp_prox, **GSPO)
    loss.backward()
    assert logp.grad[0, 0] == 0 and logp.grad[1, 0] == pytest.approx(-1.0)  # 1 sequence kept
    assert m["band_masked_frac"] == pytest.approx(0.5)


def test_gspo_band_ignores_the_ratio_to_the_policy_being_trained():
    # pi_theta / pi_prox = 3 (the old band on pi_theta / pi_b masked it); pi_prox = pi_b: kept,
    # and the clip (not the band) bounds the step: min(3, 1.2) * A = 1.2, zero gradient.
    logp = _leaf([[math.log(3.0)]])
    loss, m = rl.gspo_loss(logp, torch.zeros(1, 1), torch.tensor([1.0]), torch.ones(1, 1), **GSPO)
    assert m["band_masked_frac"] == 0.0 and loss.item() == pytest.approx(-1.2)


def test_gspo_weighs_every_sequence_equally():
    # Two sequences, 10 and 2 tokens, A = 1, pi_theta = pi_prox = pi_b (s = 1, no clip).
    # Loss = -(1/2) * sum_i s_i * A_i; d s_i / d logp_t = s_i / |y_i|, so the gradient on each
    # token of sequence i is -(1/2) / |y_i|: -0.05 (10 tokens), -0.25 (2 tokens). Each sequence's
    # tokens together get -0.5 (today's token mean: -10/12 = -0.83 vs -2/12 = -0.17).
    logp = _leaf([[0.0] * 10, [0.0] * 10])
    mask = torch.zeros(2, 10, dtype=torch.bool)
    mask[0] = True
    mask[1, :2] = True
    loss, _ = rl.gspo_loss(logp, logp.detach(), torch.tensor([1.0, 1.0]), mask, **GSPO)
    assert loss.item() == pytest.approx(-1.0)
    loss.backward()
    assert torch.allclose(logp.grad[0], torch.full((10,), -0.05))
    assert torch.allclose(logp.grad[1, :2], torch.full((2,), -0.25))
    assert logp.grad[0].sum() == pytest.approx(logp.grad[1].sum())


def test_gspo_clip():
    logp = _leaf([[math.log(1.5)]])
    loss, m = rl.gspo_loss(logp, torch.zeros(1, 1), torch.tensor([1.0]), torch.ones(1, 1), **GSPO)
    assert loss.item() == pytest.approx(-1.2)
    assert m["clip_frac"] == 1.0


def test_group_baseline():
    b, has = rl.group_baseline(["p", "p", "q"], torch.tensor([1.0, -1.0, 0.5]))
    assert b.tolist() == [0.0, 0.0, 0.5]
    assert has.tolist() == [True, True, False]


def test_running_baseline_per_kind():
    base = rl.RunningBaseline(momentum=0.5)
    b1 = base.baseline(["a", "a", "b"], torch.tensor([1.0, 0.0, -1.0]))
    assert b1.tolist() == [0.5, 0.5, -1.0]  # first batch seeds the mean
    b2 = base.baseline(["a"], torch.tensor([1.5]))
    assert b2.tolist() == [0.5]
    assert base.mean["a"] == pytest.approx(1.0)  # 0.5 * 0.5 + 0.5 * 1.5

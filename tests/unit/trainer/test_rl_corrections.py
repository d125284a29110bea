"""Hand-computed cases for the RL corrections: k3 KL metric, top-p truncation, leave-one-out
baseline, anchor penalty, and rank-global normalisers under data parallelism (gloo, 2 ranks)."""

import math

import pytest
import torch
import torch.multiprocessing as mp

from policy.toy.generate import sampling_logprobs
from trainer import rl

THETA = torch.tensor([0.5, 0.3, 0.2])
REF = torch.tensor([0.3, 0.3, 0.4])
BEHAVIOUR = torch.tensor([0.2, 0.5, 0.3])


def test_k3_metric_matches_the_exact_kl_and_k1_has_the_wrong_sign():
    # KL(theta || ref) = 0.5 ln(0.5/0.3) + 0.3 ln 1 + 0.2 ln(0.2/0.4) = 0.2554 - 0.1386 = 0.1168
    exact = float((THETA * (THETA / REF).log()).sum())
    assert exact == pytest.approx(0.1168, abs=1e-4)
    gen = torch.Generator().manual_seed(0)
    y = torch.multinomial(BEHAVIOUR, 200_000, replacement=True, generator=gen).view(-1, 1)
    logp, logp_ref, logp_b = THETA.log()[y], REF.log()[y], BEHAVIOUR.log()[y]
    mask = torch.ones_like(logp, dtype=torch.bool)
    k3 = float(rl.kl_k3_weighted(logp, logp_ref, logp_b, mask))
    assert k3 == pytest.approx(exact, abs=0.005)
    # the old metric, mean k1 under behaviour samples:
    # 0.2 ln(5/3) + 0.5 * 0 + 0.3 ln(0.5) = 0.1022 - 0.2079 = -0.1058 < 0
    k1 = float(rl.masked_mean(rl.kl_k1(logp, logp_ref), mask))
    assert k1 == pytest.approx(-0.1058, abs=0.005)


def test_k3_terms_are_never_negative():
    gen = torch.Generator().manual_seed(1)
    logp, logp_ref, logp_b = (torch.randn(64, 5, generator=gen) - 2 for _ in range(3))
    mask = torch.rand(64, 5, generator=gen) > 0.3
    assert float(rl.kl_k3_weighted(logp, logp_ref, logp_b, mask)) >= 0.0
    assert float(rl.kl_k3_weighted(logp, logp, logp_b, mask)) == 0.0


def _logits(probs):
    return torch.tensor(probs).log().view(1, 1, -1)


def test_nucleus_of_the_champion_at_temperature_one():
    # champion probs [0.5, 0.3, 0.15, 0.05], top_p 0.7: mass before each (sorted) token is
    # 0, 0.5, 0.8, 0.95 -> tokens 2, 3 start at >= 0.7: dropped. Nucleus {0, 1}.
    ref = _logits([0.5, 0.3, 0.15, 0.05])
    keep = rl.nucleus_keep(ref, torch.tensor([1.0]), torch.tensor([0.7]))
    assert keep.view(-1).tolist() == [True, True, False, False]
    # pi_prox renormalised: 0.5 / 0.8 = 0.625, 0.3 / 0.8 = 0.375; pi_theta uniform logits ->
    # 0.5, 0.5 over the same nucleus. Target 1 is inside, target 2 outside (pi_prox = 0).
    theta = _logits([0.25] * 4).requires_grad_(True)
    for target, want_prox, want_theta, inside in ((1, 0.375, 0.5, True), (2, 0.0, 0.0, False)):
        t = torch.tensor([[target]])
        lp_prox, in_prox = rl.truncated_logprobs(ref, t, torch.tensor([1.0]), keep)
        lp, in_theta = rl.truncated_logprobs(theta, t, torch.tensor([1.0]), keep)
        assert bool(in_prox) == bool(in_theta) == inside
        if inside:
            assert lp_prox.item() == pytest.approx(math.log(want_prox))
            assert lp.item() == pytest.approx(math.log(want_theta))
        else:
            assert lp_prox.item() == 0.0 and lp.item() == 0.0  # placeholders, masked out
    lp.sum().backward()
    assert torch.all(theta.grad == 0)  # no gradient through a token outside the nucleus


def test_nucleus_at_temperature_two_matches_the_sampler():
    # logits / 2 -> probs proportional to sqrt(p): .7071, .5477, .3873, .2236 (sum 1.8657)
    # = .3790, .2936, .2076, .1198; mass before: 0, .379, .6726, .8802 -> only token 3 dropped.
    # Renormalised over {0, 1, 2}: .7071 / 1.6421 = .4306, .3335, .2359.
    ref = _logits([0.5, 0.3, 0.15, 0.05])
    keep = rl.nucleus_keep(ref, torch.tensor([2.0]), torch.tensor([0.7]))
    assert keep.view(-1).tolist() == [True, True, True, False]
    lp, _ = rl.truncated_logprobs(ref.expand(1, 3, 4), torch.tensor([[0, 1, 2]]),
                                  torch.tensor([2.0]), keep.expand(1, 3, 4))
    assert lp.exp().view(-1).tolist() == pytest.approx([0.4306, 0.3335, 0.2359], abs=2e-4)
    served = sampling_logprobs(ref.view(1, -1), 2.0, 0.7)  # what the server logs
    assert lp.view(-1).tolist() == pytest.approx(served.view(-1)[:3].tolist(), abs=1e-6)


def test_top_p_one_keeps_every_token():
    keep = rl.nucleus_keep(_logits([0.9, 0.05, 0.03, 0.02]), torch.tensor([1.0]),
                           torch.tensor([1.0]))
    assert bool(keep.all())


def test_leave_one_out_baseline():
    # p: rewards 1, 0, -1 -> b = (0 - 1)/2, (1 - 1)/2, (1 + 0)/2 = -0.5, 0, 0.5; q alone: none
    b, has = rl.loo_baseline(["p", "p", "p", "q"], torch.tensor([1.0, 0.0, -1.0, 0.5]))
    assert b.tolist() == pytest.approx([-0.5, 0.0, 0.5, 0.0])
    assert has.tolist() == [True, True, True, False]


def test_anchor_penalty_has_its_own_coefficient():
    # logp = -1, ref = -1 (k1_ref = 0), anchor = -2 (k1_anchor = 1), A = 0, ratio 1:
    # A_t = -0.3 * 1 -> loss = 0.3, d loss / d logp = 0.3; the ref coefficient does nothing.
    logp = torch.tensor([[-1.0]], requires_grad=True)
    loss, m = rl.token_clip_loss(logp, logp.detach(), torch.tensor([0.0]), torch.ones(1, 1),
                                 eps_low=0.2, eps_high=0.2, is_cap=2.0,
                                 logp_ref=torch.tensor([[-1.0]]), kl_coef=0.5,
                                 logp_anchor=torch.tensor([[-2.0]]), anchor_kl_coef=0.3)
    assert loss.item() == pytest.approx(0.3)
    loss.backward()
    assert logp.grad.item() == pytest.approx(0.3)
    assert m["kl_theta_ref_k3"] == 0.0
    assert m["kl_theta_anchor_k3"] == pytest.approx(math.exp(-1.0))  # e^-1 - 1 + 1


def test_reductions_are_local_without_a_process_group():
    x = torch.tensor([1.0, 2.0])
    assert rl.world_size() == 1 and rl.dist_sum(x).tolist() == [1.0, 2.0]
    assert rl.global_mean(x, torch.tensor([True, False])).item() == 1.0


# -- two gloo ranks ---------------------------------------------------------------------------
LOGP = [[-1.0, -2.0, -0.5], [-0.3, -0.7, -1.1], [-0.2, -0.9, -1.4]]
MASK = [[True, True, True], [True, False, False], [True, True, False]]
ADV = [1.0, -2.0, 0.5]
SPLIT = ([0, 1], [2])  # rank 0: 4 tokens in 2 rows, rank 1: 2 tokens in 1 row


def _losses(rows, objective):
    logp = torch.tensor([LOGP[i] for i in rows], requires_grad=True)
    mask = torch.tensor([MASK[i] for i in rows])
    adv = torch.tensor([ADV[i] for i in rows])
    prox = (logp.detach() - 0.1)  # ratio e^0.1 inside the clip range
    if objective == "token":
        loss, _ = rl.token_clip_loss(logp, prox, adv, mask, eps_low=0.2, eps_high=0.2,
                                     is_cap=2.0, logp_prox=prox)
    else:
        loss, _ = rl.gspo_loss(logp, prox, adv, mask, eps_low=0.2, eps_high=0.2, band_low=0.5,
                               band_high=2.0, is_cap=2.0, logp_prox=prox)
    loss.backward()
    return logp.grad


def _rank(rank: int, init: str, out: dict) -> None:
    torch.distributed.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    try:
        for objective in ("token", "gspo"):
            grad = _losses(SPLIT[rank], objective) / 2  # gradients averaged over the 2 ranks
            out[(rank, objective)] = grad.tolist()
        base = rl.RunningBaseline(0.5, all_kinds=["a", "b"])
        kinds = [["a", "a"], ["b"]][rank]
        rewards = torch.tensor([[1.0, 0.0], [4.0]][rank])
        out[(rank, "baseline")] = base.baseline(kinds, rewards).tolist()
        out[(rank, "count")] = float(rl.dist_sum(torch.tensor(float(len(kinds)))))
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.integration
@pytest.mark.slow  # two spawned processes: ~40 s on the shared 2-core machine
def test_two_ranks_reproduce_the_single_process_gradient(tmp_path):
    out = mp.Manager().dict()
    mp.spawn(_rank, args=(f"file://{tmp_path / 'pg'}", out), nprocs=2, join=True)
    for objective in ("token", "gspo"):
        full = _losses([0, 1, 2], objective)
        merged = torch.cat([torch.tensor(out[(0, objective)]), torch.tensor(out[(1, objective)])])
        assert torch.allclose(merged, full, atol=1e-6), objective
    # one global batch: kind "a" mean (1 + 0) / 2 = 0.5 (rank 0), "b" 4 (rank 1); both ranks
    # hold the same running means afterwards
    assert out[(0, "baseline")] == [0.5, 0.5] and out[(1, "baseline")] == [4.0]
    assert out[(0, "count")] == out[(1, "count")] == 3.0

"""The objective's options, each against a hand-computed expectation: CISPO, the greedy rows'
filtered imitation, the NLL anchor, scaled-down negatives, zero-variance groups and the
cross-fitted value head."""

import math

import pyarrow as pa
import pytest
import torch

from policy.toy.checkpoint import save_checkpoint
from tasks.toy import generate_tasks
from trainer import rl
from trainer.baselines import CrossFitValueBaseline
from trainer.config import TrainerConfig
from trainer.recipe import NoTrainableRows, RLRecipe
from trainer.rollout import sample_rows


def test_cispo_clips_the_weight_not_the_gradient():
    # rho = [0.5 / 0.4, 0.25 / 0.25] = [1.25, 1.0]; eps_high 0.2 -> weight [1.2, 1.0]
    logp = torch.tensor([[math.log(0.5), math.log(0.25)]], requires_grad=True)
    prox = torch.tensor([[math.log(0.4), math.log(0.25)]])
    loss, m = rl.cispo_loss(logp, prox, torch.tensor([2.0]), torch.ones(1, 2), eps_low=0.2,
                            eps_high=0.2, is_cap=2.0)
    expected = -(1.2 * 2 * math.log(0.5) + 1.0 * 2 * math.log(0.25)) / 2
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-5)
    loss.backward()
    # token_clip would give the clipped token no gradient; CISPO gives it -w * A / N
    assert logp.grad.tolist() == [pytest.approx([-1.2, -1.0], rel=1e-5)]
    assert m["clip_frac"] == 0.5


def test_greedy_imitation_pushes_rewarded_rows_inside_the_trust_region():
    # row 0 rewarded: token 0 at rho 1 (pushed), token 1 at rho 1.5 > 1.2 (clipped: no push);
    # row 1 not rewarded: A = 0. Token mean over 4 tokens.
    ref = torch.log(torch.tensor([[0.5, 0.2], [0.3, 0.3]]))
    logp = (ref + torch.tensor([[0.0, math.log(1.5)], [0.0, 0.0]])).requires_grad_(True)
    loss = rl.greedy_imitation_loss(logp, ref, torch.tensor([True, False]), torch.ones(2, 2),
                                    eps_low=0.2, eps_high=0.2)
    assert float(loss.detach()) == pytest.approx(-(1.0 + 1.2) / 4, rel=1e-5)
    loss.backward()
    assert logp.grad.tolist() == [pytest.approx([-0.25, 0.0]), pytest.approx([0.0, 0.0])]


def test_nll_anchor_is_the_token_mean_nll_of_rewarded_rows():
    logp = torch.tensor([[-1.0, -2.0], [-3.0, -4.0]])
    mask = torch.tensor([[True, True], [True, False]])
    assert float(rl.nll_anchor_loss(logp, mask, torch.tensor([True, False]))) == 1.5
    assert float(rl.nll_anchor_loss(logp, mask, torch.tensor([True, True]))) == 2.0


def test_scale_negatives():
    assert rl.scale_negatives(torch.tensor([1.0, -2.0, 0.0]), 0.25).tolist() == [1.0, -0.5, 0.0]


def test_zero_variance_groups():
    got = rl.zero_variance_groups(["a", "a", "b", "b", "c"], torch.tensor([1.0, 1.0, 0.0, 1, 1]))
    assert got.tolist() == [True, True, False, False, False]  # c: a single row is no group


def test_cross_fitted_head_never_sees_a_rows_own_reward():
    """Changing the rewards of fold-0 rows leaves every fold-0 baseline as it was (their head
    is fitted on fold 1 only) and moves fold 1's."""
    vf = CrossFitValueBaseline(3, folds=2, hidden=0, lr=0.1, steps=5)
    prompts = [f"p{i}" for i in range(12)]
    fold = vf.folds_of(prompts)
    assert set(fold.tolist()) == {0, 1} and vf.folds_of(prompts).tolist() == fold.tolist()
    feats = torch.randn(12, 3, generator=torch.Generator().manual_seed(0))
    target = torch.arange(12, dtype=torch.float32)

    def after_fit(t: torch.Tensor) -> torch.Tensor:
        v = CrossFitValueBaseline(3, folds=2, hidden=0, lr=0.1, steps=5)
        v.fit(feats, t, fold)
        return v.predict(feats, fold)

    changed = torch.where(fold == 0, target + 100.0, target)
    a, b = after_fit(target), after_fit(changed)
    assert torch.equal(a[fold == 0], b[fold == 0])
    assert not torch.allclose(a[fold == 1], b[fold == 1])


@pytest.fixture
def champion(tiny_model, tmp_path):
    return save_checkpoint(tiny_model, tmp_path / "champion", metadata={"model_version": 1})


def _greedy_rows(model, rewards):
    rows = sample_rows(model, generate_tasks(len(rewards), seed=0, split="train"),
                       samples_per_task=1, model_version=1, seed=0, max_new_tokens=6,
                       temperature=0.0)
    return rows.set_column(rows.schema.get_field_index("reward"), "reward",
                           pa.array(rewards, pa.float64()))


def test_greedy_rows_train_through_the_imitation_term(tiny_model, champion):
    rows = _greedy_rows(tiny_model, [1.0, 1.0, -1.0, 0.0])
    recipe = RLRecipe(champion, rows, TrainerConfig(steps=1, batch_size=4, lr=1e-2))
    recipe.setup()
    assert recipe.counts["rows_greedy"] == 4 and recipe.counts["rows_greedy_imitated"] == 2
    before = [p.detach().clone() for p in recipe.policy.parameters()]
    m = recipe.train()
    assert m["greedy_loss"] < 0  # -(imitated tokens at ratio 1) / all greedy tokens
    assert any(not torch.equal(a, p) for a, p in zip(before, recipe.policy.parameters()))


@pytest.mark.parametrize("greedy", [{"loss": "off"}, {"min_reward": 1.0}])
def test_greedy_rows_with_nothing_to_imitate_are_no_trainable_rows(tiny_model, champion, greedy):
    rows = _greedy_rows(tiny_model, [1.0, 1.0, -1.0, 0.0])
    recipe = RLRecipe(champion, rows, TrainerConfig(steps=1, greedy=greedy))
    with pytest.raises(NoTrainableRows, match="no trainable rows: 4 rows, 0 beyond .* 4 greedy"):
        recipe.setup()


def _shortened(rows: pa.Table, i: int, n: int) -> pa.Table:
    """``rows`` with row ``i``'s response cut to its first ``n`` tokens (ids, log-probs, routing,
    count), as if it had stopped there."""
    data = rows.to_pylist()
    r = data[i]
    for key in ("response_token_ids", "response_logprobs", "routed_experts"):
        if r.get(key) is not None:
            r[key] = r[key][:n]
    r["completion_tokens"], r["finish_reason"] = n, "stop"
    return pa.Table.from_pylist(data, schema=rows.schema)


def test_zero_variance_groups_leave_the_token_mean(tiny_model, champion):
    """Two prompts x 2 samples: prompt A's rows share reward 1 (advantage 0), B's differ. With
    the option on, the loss is B's surrogate over B's tokens only: larger in size by the ratio
    of all tokens to B's tokens (the surrogate is 0 on A's tokens at the first step)."""
    rows = sample_rows(tiny_model, generate_tasks(2, seed=0, split="train"), samples_per_task=2,
                       model_version=1, seed=0, max_new_tokens=6, temperature=1.0)
    # B's two rows get different lengths: with equal ones their surrogates (advantages +a and -a)
    # cancel in the token mean, and whether a tiny random model samples EOS within 6 tokens
    # depends on the machine's floating point
    rows = _shortened(rows, 3, 4)
    prompts = rows.column("prompt").to_pylist()
    other = iter([1.0, -1.0])
    rewards = [1.0 if p == prompts[0] else next(other) for p in prompts]
    rows = rows.set_column(rows.schema.get_field_index("reward"), "reward",
                           pa.array(rewards, pa.float64()))
    cfg = dict(steps=1, batch_size=4, lr=1e-9, kl_coef=0.0, anchor_kl_coef=0.0)
    losses, tokens = {}, {}
    for drop in (False, True):
        recipe = RLRecipe(champion, rows, TrainerConfig(drop_zero_variance_groups=drop, **cfg))
        recipe.setup()
        assert recipe.counts["rows_zero_variance_group"] == 2
        idx = list(range(4))
        losses[drop] = recipe.train_step(idx)["loss"]
        tokens[drop] = sum(len(recipe.samples[i].response_ids) for i in idx
                           if not (drop and recipe.zero_var[i]))
    assert losses[True] == pytest.approx(losses[False] * tokens[False] / tokens[True], rel=1e-4)
    assert losses[False] != 0.0

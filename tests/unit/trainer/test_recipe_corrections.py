"""The recipe applies the RL corrections: greedy rows, top-p rows, groups per behaviour version,
the value-head baseline, and the fixed anchor next to the trust region."""

import pyarrow as pa
import pytest
import torch

from policy.toy.checkpoint import load_metadata, save_checkpoint
from tasks.toy import generate_tasks
from trainer.config import TrainerConfig
from trainer.recipe import RLRecipe
from trainer.rollout import sample_rows

TINY = dict(steps=1, lr=1e-9, max_staleness=100)


@pytest.fixture
def champion(tiny_model, tmp_path):
    return save_checkpoint(tiny_model, tmp_path / "champion", metadata={"model_version": 1})


def _rows(model, n=6, samples=1, **kw):
    return sample_rows(model, generate_tasks(n, seed=0, split="train"), samples_per_task=samples,
                       model_version=1, seed=0, max_new_tokens=6, **kw)


def test_greedy_rows_are_counted_and_get_no_policy_gradient(tiny_model, champion):
    greedy = _rows(tiny_model, temperature=0.0)
    rows = pa.concat_tables([greedy, _rows(tiny_model, temperature=1.0)])
    recipe = RLRecipe(champion, rows, TrainerConfig(batch_size=6, greedy={"loss": "off"}, **TINY))
    recipe.setup()
    assert recipe.counts["rows_greedy"] == greedy.num_rows
    greedy_idx = [i for i, s in enumerate(recipe.samples) if s.temperature == 0]
    m = recipe.train_step(greedy_idx)
    assert m["greedy_rows"] == len(greedy_idx) == 6
    assert m["loss"] == 0.0  # no policy-gradient term from a deterministic behaviour policy


def test_only_greedy_rows_is_no_trainable_data(tiny_model, champion):
    recipe = RLRecipe(champion, _rows(tiny_model, temperature=0.0),
                      TrainerConfig(greedy={"loss": "off"}, **TINY))
    with pytest.raises(ValueError, match="greedy"):
        recipe.setup()


def test_top_p_rows_are_scored_under_the_champions_nucleus(tiny_model, champion):
    """Rows the champion sampled at T = 0.8, top_p = 0.7: before any update pi_theta equals the
    logged (truncated, renormalised) behaviour logprob, token by token. Under the full softmax
    (today's code) every logged logprob exceeds the trainer's."""
    rows = _rows(tiny_model, n=8, samples=2, temperature=0.8, top_p=0.7)
    recipe = RLRecipe(champion, rows, TrainerConfig(batch_size=rows.num_rows, **TINY))
    recipe.setup()
    assert recipe.counts["rows_top_p"] == rows.num_rows
    assert recipe.counts["tokens_outside_nucleus"] == 0  # the champion sampled them itself
    recipe.train()
    m = recipe.history[0]
    assert abs(m["kl_behaviour_k1"]) < 1e-4 and m["ratio_mean"] == pytest.approx(1.0, abs=1e-4)
    assert m["is_weight_mean"] == pytest.approx(1.0, abs=1e-4)


def test_groups_are_per_prompt_and_behaviour_version(tiny_model, champion):
    rows = _rows(tiny_model, samples=2, temperature=1.0)  # 6 prompts x 2
    versions = [1] * 8 + [1, 0, 1, 0]  # prompts 4 and 5: one row per version each
    rows = rows.set_column(rows.schema.get_field_index("model_version"), "model_version",
                           pa.array(versions, pa.int64()))
    recipe = RLRecipe(champion, rows, TrainerConfig(**TINY), current_version=1)
    recipe.setup()
    assert recipe.counts["rows_group_baseline"] == 8
    # leave-one-out inside a pair: b_i = the other row's reward
    r = [s.reward for s in recipe.samples]
    assert recipe.group_b[:2].tolist() == pytest.approx([r[1], r[0]])


def test_value_head_is_the_baseline_without_groups(tiny_model, champion):
    rows = _rows(tiny_model, n=8, temperature=1.0)  # one row per prompt: no groups
    recipe = RLRecipe(champion, rows, TrainerConfig(batch_size=8, **TINY))
    recipe.setup()
    assert recipe.counts["rows_group_baseline"] == 0
    m = recipe.train_step(list(range(8)))
    assert "value_loss" in m and recipe.value is not None
    before = [p.clone() for p in recipe.value.head.parameters()]
    recipe.train_step(list(range(8)))
    assert any(not torch.equal(a, b) for a, b in zip(before, recipe.value.head.parameters()))


def test_anchor_next_to_the_trust_region(tiny_model, champion, tmp_path):
    torch.manual_seed(1)
    anchor_model = type(tiny_model)(tiny_model.config).eval()  # a different first champion
    anchor = save_checkpoint(anchor_model, tmp_path / "anchor", metadata={"model_version": 0})
    rows = _rows(tiny_model, n=4, samples=2, temperature=1.0)
    cfg = TrainerConfig(batch_size=8, anchor_path=str(anchor), **TINY)
    recipe = RLRecipe(champion, rows, cfg)
    recipe.setup()
    assert recipe.counts["anchor_is_champion"] == 0
    recipe.train()
    m = recipe.history[0]
    assert m["kl_theta_ref_k3"] < 1e-6 < 1e-3 < m["kl_theta_anchor_k3"]
    cand = recipe.save_checkpoint(tmp_path / "cand")
    assert load_metadata(cand)["anchor"] == str(anchor.resolve())
    # the next cycle starts from the candidate and finds the anchor in its metadata
    nxt = RLRecipe(cand, rows, TrainerConfig(batch_size=8, **TINY))
    nxt.setup()
    assert nxt.anchor_dir == anchor.resolve() and nxt.counts["anchor_is_champion"] == 0


def test_first_champion_is_its_own_anchor(tiny_model, champion):
    rows = _rows(tiny_model, n=4, samples=2, temperature=1.0)
    recipe = RLRecipe(champion, rows, TrainerConfig(batch_size=8, **TINY))
    recipe.setup()
    assert recipe.counts["anchor_is_champion"] == 1 and recipe.logp_anchor is recipe.logp_ref
    recipe.train()
    m = recipe.history[0]
    assert m["kl_theta_anchor_k3"] == m["kl_theta_ref_k3"]


def test_top_p_rows_keep_a_bit_packed_nucleus_per_response_token(tiny_model, champion):
    """No vocabulary limit any more: the champion's nucleus is V / 8 bytes per response token of
    a top-p row (trainer/nucleus.py), nothing for a top_p = 1 row."""
    rows = pa.concat_tables([_rows(tiny_model, temperature=0.8, top_p=0.7),
                             _rows(tiny_model, temperature=0.8)])
    recipe = RLRecipe(champion, rows, TrainerConfig(**TINY))
    recipe.setup()
    assert recipe.counts["rows_top_p"] == 6
    width = (tiny_model.config.vocab_size + 7) // 8
    for s, nucleus in zip(recipe.samples, recipe.nucleus):
        if s.top_p < 1:
            assert nucleus.dtype == torch.uint8
            assert nucleus.shape == (len(s.response_ids), width)
        else:
            assert nucleus is None
    m = recipe.train_step(list(range(len(recipe.samples))))
    assert m["ratio_mean"] == pytest.approx(1.0, abs=1e-4)


def test_proximal_current_centres_the_clip_on_the_policy_of_the_step(tiny_model, champion):
    """Once the policy has moved off the champion, ``proximal="champion"`` measures every ratio
    against the champion (pi_prox / pi_b = 1 on the champion's own rows), while
    ``proximal="current"`` centres it on this step's policy: every ratio is exactly 1, nothing is
    clipped, and the importance weight becomes pi_theta / pi_b."""
    rows = _rows(tiny_model, n=8, samples=2, temperature=1.0)
    m = {}
    for proximal in ("champion", "current"):
        recipe = RLRecipe(champion, rows, TrainerConfig(batch_size=rows.num_rows,
                                                        proximal=proximal, **TINY))
        recipe.setup()
        with torch.no_grad():  # the same move off the champion for both
            gen = torch.Generator().manual_seed(1)
            for p in recipe.policy.parameters():
                p.add_(0.5 * torch.randn(p.shape, generator=gen))
        m[proximal] = recipe.train_step(list(range(len(recipe.samples))))
    assert abs(m["champion"]["ratio_mean"] - 1.0) > 1e-2
    assert m["champion"]["is_weight_mean"] == pytest.approx(1.0, abs=1e-4)
    assert m["current"]["ratio_mean"] == pytest.approx(1.0, abs=1e-6)
    assert m["current"]["ratio_min"] == pytest.approx(1.0, abs=1e-6)
    assert m["current"]["clip_frac"] == 0.0
    assert abs(m["current"]["is_weight_mean"] - 1.0) > 1e-2

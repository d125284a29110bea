"""The RL recipe end to end on a tiny model: staleness, negatives kept, checkpoint written."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from policy.toy.checkpoint import load_checkpoint, load_metadata, save_checkpoint
from tasks.toy import generate_tasks
from trainer.config import TrainerConfig
from trainer.recipe import TRAIN_ROWS, RLRecipe, run_training, staleness_weights
from trainer.rollout import sample_rows


@pytest.fixture
def champion(tiny_model, tmp_path):
    return save_checkpoint(tiny_model, tmp_path / "champion", metadata={"model_version": 10})


@pytest.fixture
def rows(tiny_model):
    tasks = generate_tasks(6, seed=0, split="train")
    table = sample_rows(tiny_model, tasks, samples_per_task=2, temperature=1.0, model_version=9,
                        seed=0, max_new_tokens=6)
    versions = [9] * (table.num_rows - 3) + [1, 1, 5]
    return table.set_column(table.schema.get_field_index("model_version"), "model_version",
                            pa.array(versions, pa.int64()))


def test_staleness_weights():
    w, stale = staleness_weights([10, 6, 5, 3], 10, 4, "drop", 0.5)
    assert w == [1.0, 1.0, 0.0, 0.0] and stale == 2
    w, stale = staleness_weights([10, 5, 3], 10, 4, "downweight", 0.5)
    assert w == [1.0, 0.5, 0.125] and stale == 2


def test_stale_rows_dropped_and_counted(champion, rows):
    recipe = RLRecipe(champion, rows, TrainerConfig(steps=1, batch_size=4, max_staleness=4))
    recipe.setup()
    assert recipe.current_version == 10  # from the champion's metadata
    assert recipe.counts["rows_stale_dropped"] == 3
    assert recipe.counts["rows_used"] == rows.num_rows - 3


def test_downweighted_rows_stay(champion, rows):
    cfg = TrainerConfig(steps=1, batch_size=4, max_staleness=4, staleness_mode="downweight")
    recipe = RLRecipe(champion, rows, cfg, current_version=10)
    recipe.setup()
    assert recipe.counts["rows_stale"] == 3 and recipe.counts["rows_used"] == rows.num_rows
    assert sorted(s.weight for s in recipe.samples)[:3] == [0.5**5, 0.5**5, 0.5]


def test_malformed_answers_are_kept_as_negatives(champion, rows):
    idx = rows.schema.get_field_index("response_text")
    texts = ["a +"] * rows.num_rows  # does not parse: a malformed answer
    broken = rows.set_column(idx, "response_text", pa.array(texts))
    recipe = RLRecipe(champion, broken, TrainerConfig(steps=1, batch_size=4, max_staleness=100))
    recipe.setup()
    assert recipe.counts["rows_used"] == rows.num_rows


@pytest.mark.parametrize("objective", ["token_clip", "sequence_gspo"])
def test_run_training_writes_loadable_checkpoint(champion, rows, tmp_path, objective):
    cfg = TrainerConfig(steps=3, batch_size=4, lr=1e-3, max_staleness=100,
                        objective={"type": objective})
    metrics = run_training(champion, rows, cfg, tmp_path / "cand")
    assert pq.read_table(tmp_path / "cand" / TRAIN_ROWS).equals(rows)  # it can be trained again
    for key in ("loss", "grad_norm", "clip_frac", "kl_theta_ref_k3", "ratio_mean",
                "moe/load_entropy", "moe/over_capacity_frac", "moe/router_z_loss",
                "mismatch_kl_replay", "rows_stale_dropped", "is_truncated_frac", "greedy_rows",
                "kl_theta_anchor_k3", "dual_clip_frac"):
        assert key in metrics, key
    cand = load_checkpoint(tmp_path / "cand")
    before = load_checkpoint(champion)
    changed = any(not torch.equal(a, b) for a, b in
                  zip(cand.state_dict().values(), before.state_dict().values()))
    assert changed
    meta = load_metadata(tmp_path / "cand")
    assert meta["parent_version"] == 10 and meta["steps"] == 3


def test_first_step_on_own_samples_is_on_policy(champion, rows):
    """Before any update the policy is the behaviour policy: ratio 1, KL 0, replay exact."""
    cfg = TrainerConfig(steps=1, batch_size=rows.num_rows, lr=1e-9, max_staleness=100)
    recipe = RLRecipe(champion, rows, cfg)
    recipe.setup()
    recipe.train()
    m = recipe.history[0]
    assert m["ratio_mean"] == pytest.approx(1.0, abs=1e-4)
    assert abs(m["kl_behaviour_k1"]) < 1e-4 and abs(m["kl_theta_ref_k3"]) < 1e-6
    assert m["replay_replaced"] == 0


def test_no_trainable_rows_raises(champion, rows):
    recipe = RLRecipe(champion, rows, TrainerConfig(max_staleness=0), current_version=100)
    with pytest.raises(ValueError, match="max_staleness"):
        recipe.setup()


@pytest.mark.parametrize("top_p", [1.0, 0.8])
def test_reference_cache_reuses_logprobs_across_recipes(tiny_model, champion, top_p):
    """A shared ref_cache gives the same reference logprobs (and nucleus) without a second
    forward; a subset of the rows (bench/learning.py's one-sample arm) is served from it too."""
    tasks = generate_tasks(4, seed=1, split="train")
    rows = sample_rows(tiny_model, tasks, samples_per_task=2, temperature=1.0, model_version=10,
                       seed=1, max_new_tokens=6, top_p=top_p)
    cache: dict = {}
    cfg = TrainerConfig(steps=1, batch_size=4)
    plain = RLRecipe(champion, rows, cfg)
    plain.setup()
    first = RLRecipe(champion, rows, cfg, ref_cache=cache)
    first.setup()
    second = RLRecipe(champion, rows.take([0, 3, 5]), cfg, ref_cache=cache)
    second.setup()
    assert first.counts["rows_reference_cached"] == 0
    assert second.counts["rows_reference_cached"] == 3
    for got, want in zip(first.logp_ref, plain.logp_ref):
        assert torch.equal(got, want)
    for j, i in enumerate([0, 3, 5]):
        assert torch.equal(second.logp_ref[j], plain.logp_ref[i])
        assert torch.equal(second.inside[j], plain.inside[i])
        assert (second.nucleus[j] is None) == (top_p == 1.0)
    other = RLRecipe(champion, rows, cfg.model_copy(update={"router_replay": False}),
                     ref_cache=cache)
    other.setup()  # another routing rule: its own scope, computed again
    assert other.counts["rows_reference_cached"] == 0 and len(cache) == 2


def test_rows_whose_persistence_is_unknown_are_left_out(champion, rows):
    marks = [False, False] + [True] * (rows.num_rows - 2)
    marked = rows.set_column(rows.schema.get_field_index("trainable"), "trainable",
                             pa.array(marks, pa.bool_()))
    recipe = RLRecipe(champion, marked, TrainerConfig(steps=1, batch_size=4, max_staleness=100))
    recipe.setup()
    assert recipe.counts["rows_left_out"] == 2
    assert recipe.counts["rows_used"] == rows.num_rows - 2

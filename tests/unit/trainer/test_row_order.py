"""The candidate is a function of its rows, not of their order: ``order_by_content``."""

import pyarrow as pa
import pytest
import torch

from policy.toy.checkpoint import save_checkpoint
from tasks.toy import generate_tasks
from trainer.config import TrainerConfig
from trainer.data import order_by_content
from trainer.recipe import RLRecipe
from trainer.rollout import sample_rows


@pytest.fixture
def rows(tiny_model):
    return sample_rows(tiny_model, generate_tasks(8, seed=0, split="train"), samples_per_task=2,
                       model_version=1, seed=0, max_new_tokens=6, temperature=1.0)


def _reversed(rows: pa.Table) -> pa.Table:
    return rows.take(pa.array(range(rows.num_rows - 1, -1, -1)))


def test_the_same_rows_in_any_order_are_ordered_alike(rows):
    gen = torch.Generator().manual_seed(3)
    shuffled = rows.take(pa.array(torch.randperm(rows.num_rows, generator=gen).tolist()))
    ordered = order_by_content(rows)
    assert ordered.num_rows == rows.num_rows == 16
    assert order_by_content(shuffled).to_pylist() == ordered.to_pylist()
    assert order_by_content(_reversed(rows)).to_pylist() == ordered.to_pylist()
    assert sorted(map(str, ordered.to_pylist())) == sorted(map(str, rows.to_pylist()))


def test_equal_content_is_ordered_by_reward(rows):
    one = rows.slice(0, 1)
    twice = pa.concat_tables([one, one]).set_column(
        rows.column_names.index("reward"), "reward", pa.array([0.5, -0.5], pa.float64()))
    assert order_by_content(twice).column("reward").to_pylist() == [-0.5, 0.5]


def _trained(champion, rows) -> dict:
    recipe = RLRecipe(champion, rows, TrainerConfig(steps=2, batch_size=4, lr=1e-2,
                                                    max_staleness=100))
    recipe.setup()
    recipe.train()
    return {k: v.clone() for k, v in recipe.policy.state_dict().items()}


def test_the_candidate_does_not_depend_on_the_rows_order(tiny_model, rows, tmp_path):
    champion = save_checkpoint(tiny_model, tmp_path / "champion", metadata={"model_version": 1})
    as_logged, backwards = _trained(champion, rows), _trained(champion, _reversed(rows))
    assert any(not torch.equal(as_logged[k], backwards[k]) for k in as_logged)  # the cause
    a = _trained(champion, order_by_content(rows))
    b = _trained(champion, order_by_content(_reversed(rows)))
    assert all(torch.equal(a[k], b[k]) for k in a)

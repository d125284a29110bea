"""trainer/online.py: rounds sample from the current policy, log their version, train from the
previous round's result and keep the first champion as anchor; the placebo only permutes."""

from pathlib import Path

import pytest

from policy.toy.checkpoint import load_checkpoint, load_metadata
from trainer.config import TrainerConfig
from trainer.fixtures import tiny_champion
from trainer.online import OnlineRounds, round_rows, run_online

SETTINGS = OnlineRounds(rounds=2, prompts=3, samples=2)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_champion(tmp_path_factory.mktemp("tiny"))


def test_round_rows_are_seeded_groups_logged_by_the_round(tiny):
    model, _, _ = tiny
    rows = round_rows(model, SETTINGS, seed=1, round_=2)
    assert rows.num_rows == 6 and set(rows.column("model_version").to_pylist()) == {2}
    prompts = rows.column("prompt").to_pylist()
    assert all(prompts.count(p) % 2 == 0 for p in prompts)  # groups of `samples` rows
    assert round_rows(model, SETTINGS, 1, 2) == rows
    assert round_rows(model, SETTINGS, 1, 3).column("prompt") != rows.column("prompt")


def test_placebo_permutes_rewards_only(tiny):
    model, _, _ = tiny
    rows = round_rows(model, SETTINGS, 0, 1)
    placebo = round_rows(model, SETTINGS.model_copy(update={"shuffle_rewards": True}), 0, 1)
    assert sorted(placebo.column("reward").to_pylist()) == sorted(
        rows.column("reward").to_pylist())
    assert placebo.drop_columns(["reward"]) == rows.drop_columns(["reward"])


def test_run_online_chains_rounds_and_keeps_the_anchor(tiny, tmp_path):
    model, champion, _ = tiny
    cfg = TrainerConfig(steps=1, batch_size=4, lr=1e-2, mismatch_every=0)
    metrics = run_online(champion, cfg, SETTINGS, tmp_path / "out")
    meta = load_metadata(tmp_path / "out")
    assert meta["parent_version"] == 2 and meta["steps"] == 1  # the last round's update
    assert Path(meta["anchor"]) == Path(champion).resolve()  # not the first round's output
    assert metrics["rows_sampled"] == 12 and len(metrics["reward_mean_rounds"]) == 2
    after = load_checkpoint(tmp_path / "out")
    assert any((a - b).abs().max() > 0 for a, b in zip(after.parameters(), model.parameters()))

"""Replay: the champion's own answers on prior-distribution prompts, graded by the task's checker
at setup, make a share of every batch and train through the greedy imitation term."""

import json

import pyarrow as pa
import pytest
import torch

from policy.loader import load_policy
from tasks.toy import check, generate_tasks
from tests.unit.gating.test_gating_suite import _Says  # every greedy answer is one text
from trainer.config import TrainerConfig
from trainer.fixtures import COMMITTED
from trainer.recipe import RLRecipe
from trainer.replay import load_graded_tasks, verified_answers
from trainer.rollout import sample_rows


@pytest.fixture(scope="module")
def tasks_file(tmp_path_factory):
    tasks = generate_tasks(16, seed=3, split="heldout")
    path = tmp_path_factory.mktemp("replay") / "prior.jsonl"
    path.write_text("".join(json.dumps(t.to_dict()) + "\n" for t in tasks))
    return path, tasks


def test_only_answers_that_pass_their_check_are_kept(tasks_file):
    path, tasks = tasks_file
    champion = load_policy(COMMITTED)
    samples, tried = verified_answers(champion, path, n=16, max_new_tokens=16, timeout_s=5.0,
                                      version=3)
    assert tried == 16 and 0 < len(samples) < 16  # the warm-started toy solves some, not all
    by_prompt = {t.prompt: t for t in tasks}
    for s in samples:
        assert check(by_prompt[s.group], champion.decode(s.response_ids)).passed
        assert (s.temperature, s.reward, s.kind, s.version) == (0.0, 1.0, "replay", 3)


def test_a_share_of_every_batch_is_replay_and_it_keeps_the_prior_answers(tasks_file):
    path, _ = tasks_file
    champion = load_policy(COMMITTED)
    rows = sample_rows(champion.module, generate_tasks(8, seed=0, split="train"),
                       samples_per_task=1, model_version=1, seed=0, max_new_tokens=6,
                       temperature=1.0)
    rows = rows.set_column(rows.schema.get_field_index("reward"), "reward",
                           pa.array([1.0 if i % 2 else -1.0 for i in range(rows.num_rows)]))
    base = dict(steps=4, batch_size=8, lr=3e-3, kl_coef=0.0, anchor_kl_coef=0.0)
    with_replay = RLRecipe(COMMITTED, rows, TrainerConfig(
        **base, replay={"path": str(path), "prompts": 16, "max_new_tokens": 16}))
    with_replay.setup()
    answers = with_replay.samples[with_replay.n_traffic:]
    assert with_replay.counts["replay_verified"] == len(answers) > 0
    with_replay.train()
    assert [h["replay_rows"] for h in with_replay.history] == [2.0] * 4  # round(0.25 * 8)
    assert all(h["greedy_loss"] != 0.0 for h in with_replay.history)
    without = RLRecipe(COMMITTED, rows, TrainerConfig(**base))  # same seed, traffic only
    without.setup()
    without.train()
    assert all(h["replay_rows"] == 0.0 for h in without.history)
    # the champion's verified answers stay more likely when they are replayed
    assert _logp(with_replay, answers) > _logp(without, answers)


def _logp(recipe, samples):
    from trainer.recipe import policy_logprobs

    batch = recipe._collate(samples)
    with torch.no_grad():
        logp, _ = policy_logprobs(recipe.plug, batch, replay=True, replay_min_ratio=0.1)
    return float(logp[batch.resp_mask].mean())


def test_replay_needs_the_greedy_term():
    with pytest.raises(ValueError, match="greedy.loss='filtered'"):
        TrainerConfig(replay={"path": "x.jsonl"}, greedy={"loss": "off"})


def test_a_task_without_a_check_is_named(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "1+1="}\n')
    with pytest.raises(ValueError, match=r"p.jsonl:1: .*'tests'"):
        load_graded_tasks(path, 4, timeout_s=1.0)


@pytest.mark.parametrize("answer", ["-" * 6000, "def f(x):\n    return " + "-" * 3000 + "x\n",
                                    "(" * 5000])
def test_a_degenerate_greedy_answer_is_not_kept_and_does_not_stop_the_setup(answer, tmp_path):
    """A champion whose greedy answer is a run of one token (which makes CPython's compiler
    raise MemoryError or RecursionError) replays nothing for those tasks."""
    from pathlib import Path

    suite = Path(__file__).resolve().parents[3] / "tasks/data/pyfuncs_gate.jsonl"
    lines = suite.read_text().splitlines()[:2]
    path = tmp_path / "prior.jsonl"
    path.write_text("\n".join(lines) + "\n")
    champion = _Says(load_policy(COMMITTED), answer)
    samples, tried = verified_answers(champion, path, n=2, max_new_tokens=64, timeout_s=5.0,
                                      version=1)
    assert (samples, tried) == ([], 2)

"""RL corrects the planted habit: from the lazy-fix champion (trainer/habit.py), RL on rows it
logged itself raises the off_by_one pass rate on held-out tasks, and the same rows with shuffled
rewards do not do as well. Guards the recipe the demo and bench/loop.py start from.

Small on purpose (about a minute and a half): 500 train-split prompts x 4 samples at T = 1
recorded from the committed lazy champion with the fixture's reward rule, 60 steps of 64 rows,
greedy on the off_by_one tasks of the seed-7 held-out draw. Thresholds were set before the first
run of this test: a gain of at least 0.03 (about 9 of ~300 tasks) and more than the placebo's.
"""

import pytest

from policy.toy.checkpoint import load_checkpoint
from tasks.toy import generate_tasks
from trainer.config import TrainerConfig
from trainer.evaluate import evaluate
from trainer.fixtures import lazy_champion_dir, record_rows
from trainer.online import shuffle_rewards
from trainer.recipe import run_training

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MIN_GAIN = 0.03


def test_rl_corrects_the_planted_lazy_fix_habit(tmp_path):
    champ = lazy_champion_dir()
    rows = record_rows(champ, n_tasks=500)
    heldout = [t for t in generate_tasks(900, seed=7, split="heldout") if t.kind == "off_by_one"]
    before = evaluate(load_checkpoint(champ), heldout).pass_rate
    after = {}
    for arm, arm_rows in (("rl", rows), ("placebo", shuffle_rewards(rows, "placebo/0"))):
        run_training(champ, arm_rows, TrainerConfig(seed=0, steps=60, mismatch_every=0),
                     tmp_path / arm)
        after[arm] = evaluate(load_checkpoint(tmp_path / arm), heldout).pass_rate
    assert after["rl"] - before >= MIN_GAIN, (before, after)
    assert after["rl"] > after["placebo"], (before, after)

"""It must learn: RL on the recorded fixture raises the held-out pass rate over 3 seeds, clearly
above seed noise, without lengthening answers.

The fixture (tests/fixtures/rl_rows.parquet) was recorded from the warm-started champion with the
simulator's reward rule (trainer/fixtures.py); the champion is re-created deterministically and
cached under .cache/ratchet/ on first use (about two minutes on two idle cores).
"""

import statistics
from pathlib import Path

import pytest

from ratchet.tasks import generate_tasks
from trainer.checkpoint import load_checkpoint
from trainer.config import TrainerConfig
from trainer.evaluate import evaluate
from trainer.fixtures import FIXTURE, champion_dir, fixture_rows
from trainer.recipe import run_training

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SEEDS = (0, 1, 2)
STEPS = 40
MIN_GAIN = 0.05  # per seed, absolute pass-rate points on 300 held-out tasks
MAX_TOKEN_GROWTH = 1.10


def test_fixture_is_small_and_recorded():
    assert FIXTURE.exists() and FIXTURE.stat().st_size < 2 * 1024 * 1024
    rows = fixture_rows()
    rewards = rows.column("reward").to_pylist()
    assert rows.num_rows >= 400
    assert min(rewards) < 0 < max(rewards)  # both successes and failures to learn from


@pytest.mark.xfail(
    reason="known gap (issue 4): on this fixture the RL update keeps or lowers the held-out "
    "pass rate (lr 3e-4 x 40: 0.19 -> 0.14; lr 1e-4 x 20: 0.16 -> 0.16); see bench/learning.py",
    strict=False,
)
def test_rl_improves_heldout_pass_rate_over_three_seeds(tmp_path: Path):
    champ = champion_dir()
    rows = fixture_rows()
    heldout = generate_tasks(300, seed=7, split="heldout")
    before = evaluate(load_checkpoint(champ), heldout)
    gains, tokens = [], []
    for seed in SEEDS:
        out = tmp_path / f"seed{seed}"
        run_training(champ, rows, TrainerConfig(seed=seed, steps=STEPS), out)
        after = evaluate(load_checkpoint(out), heldout)
        gains.append(after.pass_rate - before.pass_rate)
        tokens.append(after.mean_tokens)
    assert min(gains) >= MIN_GAIN, (before.pass_rate, gains)
    assert statistics.mean(gains) > 3 * statistics.pstdev(gains), gains
    assert max(tokens) <= before.mean_tokens * MAX_TOKEN_GROWTH, (before.mean_tokens, tokens)

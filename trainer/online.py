"""Online RL rounds: sample from the current policy, reward, train, repeat.

The regime the production loop approximates, without the fleet: ``OnlineRounds`` settings run
``rounds`` rounds from a start checkpoint; each round draws ``prompts`` train-split tasks (seeded
per run seed and round), samples ``samples`` answers per task from the *current* policy at T = 1
with ``trainer.rollout.sample_rows`` (the recorded fixture's reward rule: +1 / -1 minus the
concave length cost), trains ``config.steps`` steps on them with ``trainer.recipe.run_training``
(``current_version`` = the round, rows logged by that version: on-policy, groups of ``samples``
rows per prompt for the leave-one-out baseline), and the next round starts from the result. The
KL anchor stays the start checkpoint (recorded in every round's metadata by the recipe).
``shuffle_rewards`` permutes the rewards inside each round (seeded): the placebo.

Left out: the fleet, Kafka and delayed signals (ratchet/ and bench/loop.py run the real loop);
toy policies only (``sample_rows`` reads the toy MoE's routing).
"""

from __future__ import annotations

import random
import shutil
import tempfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from trainer.config import TrainerConfig


class OnlineRounds(BaseModel):
    """How many rounds, and how many fresh rows each round samples from the current policy."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rounds: int = Field(4, ge=1, le=1000, description="Sample-then-train rounds.")
    prompts: int = Field(480, ge=1, le=100_000, description="Train-split tasks drawn per round.")
    samples: int = Field(4, ge=1, le=64, description="Answers sampled per task (group size).")
    temperature: float = Field(1.0, gt=0.0, le=2.0, description="Sampling temperature.")
    task_seed: int = Field(5000, ge=0, description="Tasks of round r for run seed s are "
                           "generate_tasks(prompts, task_seed + 1000 * s + r, 'train').")
    shuffle_rewards: bool = Field(False, description="Permute rewards within each round "
                                  "(seeded): the shuffled-reward placebo.")


def round_rows(model, settings: OnlineRounds, seed: int, round_: int):
    """The reward rows of one round: sampled from ``model`` (logged as version ``round_``)."""
    from tasks.toy import generate_tasks
    from trainer.rollout import sample_rows

    tasks = generate_tasks(settings.prompts, settings.task_seed + 1000 * seed + round_, "train")
    rows = sample_rows(model, tasks, samples_per_task=settings.samples,
                       temperature=settings.temperature, model_version=round_,
                       seed=1000 * seed + round_)
    return shuffle_rewards(rows, f"online/{seed}/{round_}") if settings.shuffle_rewards else rows


def shuffle_rewards(rows, key: str):
    """``rows`` with the reward column permuted (seeded by ``key``), everything else kept."""
    import pyarrow as pa

    rewards = rows.column("reward").to_pylist()
    random.Random(key).shuffle(rewards)
    i = rows.schema.get_field_index("reward")
    field = rows.schema.field(i)
    return rows.set_column(i, field, pa.array(rewards, field.type))


def run_online(start: Path, config: TrainerConfig, settings: OnlineRounds, out: Path
               ) -> dict[str, float]:
    """``settings.rounds`` rounds of ``config.steps`` steps each from ``start``; the final
    checkpoint is written to ``out``. Returns the last round's train metrics plus per-run
    totals (``rows_sampled``, ``reward_mean_rounds``: the sampled reward mean of each round)."""
    from policy.toy.checkpoint import load_checkpoint
    from trainer.recipe import run_training

    current, rewards, metrics = Path(start), [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(1, settings.rounds + 1):
            rows = round_rows(load_checkpoint(current), settings, config.seed, r)
            if not settings.shuffle_rewards:
                rewards.append(sum(rows.column("reward").to_pylist()) / rows.num_rows)
            cfg = config.model_copy(update={"seed": config.seed * 1000 + r})
            nxt = Path(tmp) / f"round{r}"
            metrics = run_training(current, rows, cfg, nxt, current_version=r)
            current = nxt
        if Path(out).exists():
            shutil.rmtree(out)
        shutil.copytree(current, out)
    return {**metrics, "rows_sampled": float(settings.rounds * settings.prompts
                                             * settings.samples),
            "reward_mean_rounds": rewards}

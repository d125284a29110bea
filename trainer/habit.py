"""A champion RL can improve: the warm start taught a lazy-fix habit by imperfect demonstrations.

The 1,000-step warm start (``trainer.fixtures.champion_dir()``) has little headroom that RL can
reach: it memorised much of the train split, and on fresh tasks its greedy pass rate is close to
its pass@4 (``bench/headroom.py``). Production models are different: supervised data from an
imperfect teacher leaves habits that the model's own samples already contradict, which is what RL
on product feedback corrects. This module builds such a champion by a fixed recipe:
``plant_lazy_fix`` continues the warm start for ``steps`` SFT steps on fresh train-split tasks in
which a ``share`` of the ``off_by_one`` demonstrations are the *unfixed* line copied from the
prompt (a teacher that leaves the bug in place). The model then prefers copying the bug, while it
still samples the fix some of the time; arith and complete demonstrations stay correct.

The habit is planted on purpose and says so wherever it is used (the bootstrap run's tags, the
checkpoint's metadata, the demo's banner). The recipe (share 0.5, 150 steps, lr 1e-3) was chosen
on the seed-7 held-out draw, never on the fresh set (``bench/results/learning_tuning.md``).
Deterministic for its recipe on CPU. Left out: habits in other task kinds.
"""

from __future__ import annotations

import random

from tasks.toy import Task

LAZY_SHARE = 0.5
LAZY_STEPS = 150
LAZY_LR = 1e-3
LAZY_SEED = 4242
BATCH = 48


def lazy_answer(task: Task) -> str:
    """The buggy line of an ``off_by_one`` prompt, copied unchanged (it fails the checker)."""
    if task.kind != "off_by_one":
        raise ValueError(f"only off_by_one tasks have a lazy answer, not {task.kind!r}")
    return task.prompt.split("\n    return ", 1)[1].split("\n# fixed:", 1)[0]


def demonstrations(tasks: list[Task], share: float, rng: random.Random) -> list[str]:
    """The teacher's answers: the reference, except for a ``share`` of off_by_one tasks."""
    return [lazy_answer(t) if t.kind == "off_by_one" and rng.random() < share else t.reference
            for t in tasks]


def plant_lazy_fix(model, *, share: float = LAZY_SHARE, steps: int = LAZY_STEPS,
                   lr: float = LAZY_LR, seed: int = LAZY_SEED):
    """Continue ``model`` (a warm-started toy MoE) on the lazy teacher's demonstrations; returns
    it in eval mode."""
    import torch
    import torch.nn.functional as F

    from policy.toy.tokenizer import PAD
    from runtime.progress import Progress
    from tasks.toy import generate_tasks
    from trainer.sft import task_batch

    torch.manual_seed(seed)
    rng = random.Random(f"ratchet.habit/{seed}")
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.01)
    tasks = generate_tasks(steps * BATCH, seed, "train")
    with Progress("lazy-fix habit", total=steps, unit="step") as progress:
        for step in range(steps):
            batch = tasks[step * BATCH:(step + 1) * BATCH]
            inputs, targets, mask = task_batch(batch, demonstrations(batch, share, rng))
            out = model(inputs, pad_mask=inputs != PAD)
            loss = F.cross_entropy(out.logits[mask], targets[mask]) + out.aux_loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            progress.update()
    return model.eval()

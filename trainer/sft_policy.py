"""Supervised warm start of any policy (toy or Hugging Face) on the toy task family.

The same recipe as trainer/sft.py (cross-entropy on the answer tokens and EOS only, the prompt is
context; AdamW, linear warmup, cosine decay; the policy's own aux loss added), written against the
policy plug: the prompt is fed as the policy serves it (``Policy.encode_prompt``, BOS included),
the answer is tokenised on its own (no special tokens) and ends with the tokenizer's first EOS id,
exactly the ids a served completion of that answer would have. Deterministic for a seed on CPU.
trainer/sft.py stays the toy's warm start (its cached champions are keyed by it). Left out:
packing, mixed precision, distributed training, chat formatting of the answer.
"""

from __future__ import annotations

import torch
from torch import Tensor

from policy.base import Policy
from runtime.progress import Progress
from tasks.toy import Task, generate_tasks
from trainer.sft import lr_at


def answer_ids(policy: Policy, text: str) -> list[int]:
    """``text`` as response token ids: no BOS or other special tokens (the toy: its bytes)."""
    tokenizer = getattr(policy, "tokenizer", None)
    if tokenizer is None:
        from policy.toy.tokenizer import encode

        return list(encode(text))
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def sft_batch(policy: Policy, tasks: list[Task]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Right-padded (inputs, targets, pad_mask, loss_mask), each (B, T); the loss mask covers the
    positions predicting the answer and its EOS."""
    info = policy.tokenizer_info
    rows, starts = [], []
    for task in tasks:
        prompt = policy.encode_prompt(task.prompt)
        row = (prompt + answer_ids(policy, task.reference) + [info.eos_ids[0]])
        rows.append(row[: policy.max_seq_len + 1])
        starts.append(len(prompt))
    width = max(len(r) for r in rows) - 1
    inputs = torch.full((len(rows), width), info.pad_id, dtype=torch.long)
    targets = torch.full_like(inputs, info.pad_id)
    pad = torch.zeros(len(rows), width, dtype=torch.bool)
    loss = torch.zeros_like(pad)
    for i, (r, s) in enumerate(zip(rows, starts)):
        n = len(r) - 1
        inputs[i, :n], targets[i, :n] = torch.tensor(r[:-1]), torch.tensor(r[1:])
        pad[i, :n] = True
        loss[i, s - 1 : n] = True
    return inputs, targets, pad, loss


def sft_loss(policy: Policy, tasks: list[Task]) -> tuple[Tensor, Tensor]:
    """(cross-entropy over answer tokens, the policy's weighted aux loss)."""
    inputs, targets, pad, mask = sft_batch(policy, tasks)
    device = next(policy.module.parameters()).device
    out = policy.token_logprobs(inputs.to(device), targets.to(device), pad.to(device),
                                torch.ones(len(tasks), device=device))
    mask = mask.to(device)
    ce = -(out.logprobs * mask).sum() / mask.sum().clamp(min=1)
    return ce, out.aux_loss


def warm_start_policy(
    policy: Policy, *, seed: int, steps: int, batch_size: int = 32, lr: float = 3e-3,
    warmup: int = 20, n_tasks: int = 4000,
) -> list[float]:
    """Train ``policy`` in place for ``steps`` steps on the train split; returns the CE curve."""
    torch.manual_seed(seed)
    tasks = generate_tasks(n_tasks, seed, "train")
    opt = torch.optim.AdamW(policy.module.parameters(), lr=lr, weight_decay=0.01)
    order = torch.randperm(len(tasks), generator=torch.Generator().manual_seed(seed)).tolist()
    policy.module.train()
    curve: list[float] = []
    progress = Progress(f"warm start ({steps} steps)", total=steps, unit="step")
    try:
        for step in range(steps):
            for group in opt.param_groups:
                group["lr"] = lr_at(step, steps, lr, warmup)
            start = (step * batch_size) % len(order)
            batch = [tasks[order[(start + j) % len(order)]] for j in range(batch_size)]
            ce, aux = sft_loss(policy, batch)
            opt.zero_grad(set_to_none=True)
            (ce + aux).backward()
            torch.nn.utils.clip_grad_norm_(policy.module.parameters(), 1.0)
            opt.step()
            curve.append(float(ce.detach()))
            progress.update(1)
    finally:
        progress.close()
        policy.module.eval()
    return curve

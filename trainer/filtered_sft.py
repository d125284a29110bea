"""Filtered SFT (rejection-sampling fine-tuning): the supervised baseline an RL update must beat.

Cross-entropy on the logged responses whose reward is above a threshold, starting from the
champion. Its own module, not trainer/sft.py: that file's text keys the cached champion
(trainer/fixtures.py). Left out: KL to a reference, routing replay, DeepSpeed/Ray, HF policies.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def filtered_sft(champion_dir, rows, out_dir, *, steps: int, batch_size: int = 64,
                 lr: float = 1e-4, seed: int = 0, min_reward: float = 0.0):
    """The filtered-SFT baseline of an RL update (rejection-sampling fine-tuning): cross-entropy
    on the logged responses whose reward is above ``min_reward``, starting from the champion,
    ``steps`` AdamW steps of ``batch_size`` rows (the logged temperature applied to the logits).
    Returns the number of rows kept. Toy policy only; no KL, no routing replay."""
    import pyarrow.compute as pc

    from policy.toy.checkpoint import load_checkpoint, save_checkpoint
    from trainer.data import collate, rows_to_samples

    kept = rows.filter(pc.greater(rows.column("reward"), min_reward))
    if "trainable" in kept.column_names:  # rows whose persistence is unknown are left out
        kept = kept.filter(pc.invert(pc.fill_null(pc.equal(kept.column("trainable"), False),
                                                  False)))
    if kept.num_rows == 0:
        raise ValueError(f"no row has reward > {min_reward}")
    torch.manual_seed(seed)
    model = load_checkpoint(champion_dir).train()
    samples, _ = rows_to_samples(kept, vocab_size=model.config.vocab_size,
                                 max_seq_len=model.config.max_seq_len)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    gen, order = torch.Generator().manual_seed(seed), []
    for _ in range(steps):
        if len(order) < batch_size:
            order += torch.randperm(len(samples), generator=gen).tolist()
        idx, order = order[:batch_size], order[batch_size:]
        b = collate([samples[i] for i in idx], n_layers=0, top_k=1)
        out = model(b.tokens, pad_mask=b.pad_mask)
        logits = out.logits / b.temperature.view(-1, 1, 1)
        loss = F.cross_entropy(logits[b.resp_mask], b.targets[b.resp_mask]) + out.aux_loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    save_checkpoint(model.eval(), out_dir, metadata={"origin": "filtered_sft", "steps": steps,
                                                     "rows_kept": kept.num_rows})
    return kept.num_rows

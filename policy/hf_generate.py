"""Batched sampling from an :class:`policy.hf.HFPolicy` with a KV cache, recording what RL needs.

Like the toy's loop (policy/toy/generate.py): prompts (token ids) are left-padded so one prefill
serves the batch; each sampled token keeps its logprob under the distribution actually sampled
(temperature and top-p applied, renormalised) and the routing at the position whose logits were
sampled; the prefill's routing of every prompt position is kept too. ``stop_when`` (a predicate on
a row's decoded text, checked after each token) ends a row early, e.g. once a chat reply's code
block is closed.

What is not model compute is kept off the step: a row that has finished leaves the batch (its
KV-cache rows are dropped, so later steps compute only live rows), the attention mask is one
tensor allocated for the whole decode and sliced, the per-step host work is one ``tolist`` per
tensor rather than one per row, and routing is read as expert ids only (no router softmax).
Greedy outputs are the same tokens as a batch-of-one decode; sampled rows draw from the same
distribution (a shrinking batch consumes the generator differently, so draws are not the same
numbers as before). Left out: beam search, streaming.

``per_row=True`` couples the draws of two models decoding the same prompts (common random
numbers that hold): row ``i`` has its own generator, seeded by ``seed`` and ``i`` alone, which
draws one exponential per vocabulary entry at each step, and the token is the exponential race's
winner, argmax p / E (the Gumbel-max trick: a draw from p exactly). A row's tokens then depend on
its own logits and its own stream only, not on which other rows are in the batch or when they
finish (with one shared generator, the first row that ends at another step in one model shifts
every later draw of every row), and where two models' distributions are close the race mostly
has the same winner.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from policy.base import Sampled, left_pad
from policy.toy.generate import sampling_logprobs


def decode_loop(policy, prompts: list[list[int]], steps: int, temperature: float, top_p: float,
                seed: int | None, stop_when: Callable[[str], bool] | None = None,
                per_row: bool = False) -> list[Sampled]:
    """Sample up to ``steps`` tokens per prompt; see the module docstring."""
    from transformers import DynamicCache

    model, info = policy.module, policy.tokenizer_info
    device = next(model.parameters()).device
    tokens, mask = left_pad(prompts, info.pad_id, device)
    n, width = tokens.shape
    # One (B, W + steps) mask for the whole decode: generated positions are always real tokens.
    full_mask = torch.ones(n, width + steps, dtype=torch.long, device=device)
    full_mask[:, :width] = mask.long()
    positions = (mask.long().cumsum(1) - 1).clamp(min=0)
    gen = torch.Generator(device=device).manual_seed(seed) if seed is not None else None
    streams = row_generators(seed, n) if per_row and temperature > 0 else None
    eos = torch.tensor(info.eos_ids, device=device)
    cache = DynamicCache(config=model.config)
    out: list[tuple[list, list, list]] = [([], [], []) for _ in prompts]
    prompt_routes: list[list] = [[] for _ in prompts]
    stopped = [False] * n
    live = list(range(n))  # prompt index of each batch row
    is_moe = policy.moe_spec.is_moe
    for step in range(steps):
        policy._state.reset()
        o = model(input_ids=tokens, attention_mask=full_mask[:, :width + step],
                  position_ids=positions, past_key_values=cache, use_cache=True, logits_to_keep=1)
        routed = policy._routed_ids(*tokens.shape) if is_moe else None
        if step == 0 and routed is not None:
            prompt_routes = [routed[i, width - len(p):].tolist() for i, p in enumerate(prompts)]
        logp = sampling_logprobs(o.logits[:, -1], temperature, top_p)
        if temperature == 0.0:
            nxt = logp.argmax(-1)
        elif streams is not None:
            nxt = race(logp, torch.stack([torch.empty(logp.shape[1]).exponential_(
                generator=streams[i]) for i in live]).to(device))
        else:
            nxt = torch.multinomial(logp.exp(), 1, generator=gen).squeeze(1)
        lp = logp.gather(1, nxt.unsqueeze(1)).squeeze(1)
        last = routed[:, -1].tolist() if routed is not None else None
        finished = torch.isin(nxt, eos).tolist()
        for b, (i, tok, p) in enumerate(zip(live, nxt.tolist(), lp.tolist())):
            out[i][0].append(tok)
            out[i][1].append(p)
            if last is not None:
                out[i][2].append(last[b])
            if not finished[b] and stop_when is not None and stop_when(policy.decode(out[i][0])):
                finished[b], stopped[i] = True, True
        if all(finished):
            break
        if any(finished):  # drop finished rows from the batch and the cache
            keep = [b for b, f in enumerate(finished) if not f]
            idx = torch.tensor(keep, device=device)
            cache.batch_select_indices(idx)
            full_mask, positions, nxt = full_mask[idx], positions[idx], nxt[idx]
            live = [live[b] for b in keep]
        tokens = nxt.unsqueeze(1)
        positions = positions[:, -1:] + 1
    policy._state.reset()
    return [_finish(policy, p, pr, *o_, by_predicate=st)
            for p, pr, o_, st in zip(prompts, prompt_routes, out, stopped)]


def row_generators(seed: int | None, rows: int) -> list[torch.Generator]:
    """One CPU generator per row, seeded by ``seed`` and the row's index alone (the same
    whatever the batch's size)."""
    if seed is None:
        raise ValueError("per-row sampling needs a seed")
    return [torch.Generator().manual_seed(seed * 1_000_003 + i) for i in range(rows)]


def race(logp: torch.Tensor, exponentials: torch.Tensor) -> torch.Tensor:
    """Per row of ``logp`` (B, V), the winner of the exponential race: argmax p / E, a draw from
    p (a token of probability 0 never wins)."""
    return (logp - exponentials.log()).argmax(-1)


def _finish(policy, prompt: list[int], prompt_routes: list, ids: list[int], lps: list[float],
            routes: list, *, by_predicate: bool = False) -> Sampled:
    eos = bool(ids) and ids[-1] in policy.tokenizer_info.eos_ids
    stopped = eos or by_predicate
    text = policy.decode(ids[:-1] if eos else ids)
    if not policy.moe_spec.is_moe:
        routes, prompt_routes = [], []
    return Sampled(text, list(prompt), ids, lps, routes, prompt_routes,
                   "stop" if stopped else "length")

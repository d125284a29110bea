"""Batched sampling from an :class:`policy.hf.HFPolicy` with a KV cache, recording what RL needs.

Like the toy's loop (policy/toy/generate.py): prompts (token ids) are left-padded so one prefill
serves the batch; each sampled token keeps its logprob under the distribution actually sampled
(temperature and top-p applied, renormalised) and the routing at the position whose logits were
sampled; the prefill's routing of every prompt position is kept too. ``stop_when`` (a predicate on
a row's decoded text, checked after each token) ends a row early, e.g. once a chat reply's code
block is closed. Left out: beam search, streaming.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from policy.base import Sampled, left_pad
from policy.toy.generate import sampling_logprobs


def decode_loop(policy, prompts: list[list[int]], steps: int, temperature: float, top_p: float,
                seed: int | None, stop_when: Callable[[str], bool] | None = None,
                ) -> list[Sampled]:
    """Sample up to ``steps`` tokens per prompt; see the module docstring."""
    from transformers import DynamicCache

    model, info = policy.module, policy.tokenizer_info
    device = next(model.parameters()).device
    tokens, mask = left_pad(prompts, info.pad_id)
    tokens, mask = tokens.to(device), mask.to(device)
    positions = (mask.long().cumsum(1) - 1).clamp(min=0)
    gen = torch.Generator(device=device).manual_seed(seed) if seed is not None else None
    eos = torch.tensor(info.eos_ids, device=device)
    cache = DynamicCache(config=model.config)
    done = torch.zeros(len(prompts), dtype=torch.bool, device=device)
    out: list[tuple[list, list, list]] = [([], [], []) for _ in prompts]
    prompt_routes: list[list] = []
    stopped = [False] * len(prompts)
    for _ in range(steps):
        policy._state.reset()
        o = model(input_ids=tokens, attention_mask=mask.long(), position_ids=positions,
                  past_key_values=cache, use_cache=True, logits_to_keep=1)
        routed, _ = policy._routing(*tokens.shape)
        if not prompt_routes:
            width = tokens.shape[1]
            prompt_routes = [routed[i, width - len(p):].tolist() for i, p in enumerate(prompts)]
        logp = sampling_logprobs(o.logits[:, -1], temperature, top_p)
        if temperature == 0.0:
            nxt = logp.argmax(-1)
        else:
            nxt = torch.multinomial(logp.exp(), 1, generator=gen).squeeze(1)
        lp = logp.gather(1, nxt.unsqueeze(1)).squeeze(1)
        for i in torch.nonzero(~done).flatten().tolist():
            out[i][0].append(int(nxt[i]))
            out[i][1].append(float(lp[i]))
            out[i][2].append(routed[i, -1].tolist())
        done |= torch.isin(nxt, eos)
        if stop_when is not None:
            for i in torch.nonzero(~done).flatten().tolist():
                if stop_when(policy.decode(out[i][0])):
                    done[i], stopped[i] = True, True
        if bool(done.all()):
            break
        tokens = nxt.unsqueeze(1)
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        positions = positions[:, -1:] + 1
    policy._state.reset()
    return [_finish(policy, p, pr, *o_, by_predicate=st)
            for p, pr, o_, st in zip(prompts, prompt_routes, out, stopped)]


def _finish(policy, prompt: list[int], prompt_routes: list, ids: list[int], lps: list[float],
            routes: list, *, by_predicate: bool = False) -> Sampled:
    eos = bool(ids) and ids[-1] in policy.tokenizer_info.eos_ids
    stopped = eos or by_predicate
    text = policy.decode(ids[:-1] if eos else ids)
    if not policy.moe_spec.is_moe:
        routes, prompt_routes = [], []
    return Sampled(text, list(prompt), ids, lps, routes, prompt_routes,
                   "stop" if stopped else "length")

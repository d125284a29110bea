"""Batched sampling from the MoE with a KV cache, recording what off-policy RL needs.

For every generated token: its id, its log-probability under the distribution actually sampled
from (temperature and top-p applied and renormalised; under temperature 1 without top-p when
greedy, ``temperature == 0``), and the experts that produced it (the routing at the position whose
logits were sampled), shape (tokens, layers, top_k). Prompts are left-padded so one prefill serves
the batch. Everything runs on the model's device (prompts are padded on the CPU, then moved).

Left out: beam search, stop strings other than EOS, streaming (serve/ wraps this per request).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from policy.base import left_pad
from policy.toy.model import KVCache, MoETransformer
from policy.toy.tokenizer import BOS, EOS, PAD, decode, encode


@dataclass
class Generation:
    """One completion. ``token_ids`` includes the final EOS when ``finish_reason == 'stop'``."""

    text: str
    token_ids: list[int]
    logprobs: list[float]
    routed_experts: list[list[list[int]]]
    finish_reason: Literal["stop", "length"]
    prompt_tokens: int


def encode_prompt(prompt: str) -> list[int]:
    """The ids a prompt is fed as: BOS then its bytes (the trainer uses the same)."""
    return [BOS, *encode(prompt)]


def sampling_logprobs(logits: Tensor, temperature: float, top_p: float) -> Tensor:
    """Log-probabilities (B, V) of the distribution sampled from: logits / T, then top-p."""
    if temperature == 0.0:
        return torch.log_softmax(logits.float(), -1)
    logp = torch.log_softmax(logits.float() / temperature, -1)
    if top_p >= 1.0:
        return logp
    sorted_logp, order = logp.sort(-1, descending=True)
    cum = sorted_logp.exp().cumsum(-1)
    drop_sorted = (cum - sorted_logp.exp()) >= top_p  # keep the smallest prefix reaching top_p
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return torch.log_softmax(logp.masked_fill(drop, float("-inf")), -1)


@torch.no_grad()
def generate(
    model: MoETransformer,
    prompts: list[str],
    *,
    max_new_tokens: int,
    temperature: float,
    top_p: float = 1.0,
    seed: int | None,
) -> list[Generation]:
    """Sample a continuation of each prompt; greedy when ``temperature == 0``."""
    rows = [encode_prompt(p) for p in prompts]
    gens, _ = generate_ids(model, rows, max_new_tokens=max_new_tokens, temperature=temperature,
                           top_p=top_p, seed=seed)
    return gens


@torch.no_grad()
def generate_ids(
    model: MoETransformer,
    rows: list[list[int]],
    *,
    max_new_tokens: int,
    temperature: float,
    top_p: float = 1.0,
    seed: int | None,
) -> tuple[list[Generation], list[list]]:
    """:func:`generate` from prompt ids; also returns each prompt's routing (P, L, k)."""
    if temperature < 0 or not 0 < top_p <= 1:
        raise ValueError(f"need temperature >= 0 and 0 < top_p <= 1, got {temperature}, {top_p}")
    if not rows:
        return [], []
    was_training = model.training
    model.eval()
    device = model.tok_emb.weight.device
    gen = torch.Generator(device).manual_seed(seed) if seed is not None else None
    budget = model.config.max_seq_len - max(len(r) for r in rows)
    steps = min(max_new_tokens, budget)
    if steps < 1:
        raise ValueError(f"prompt of {max(len(r) for r in rows)} tokens leaves no room "
                         f"under max_seq_len={model.config.max_seq_len}")
    out, prompt_routes = _decode_loop(model, rows, steps, temperature, top_p, gen)
    model.train(was_training)
    gens = [_finish(ids, lps, routes, len(r)) for r, (ids, lps, routes) in zip(rows, out)]
    return gens, prompt_routes


def _decode_loop(model: MoETransformer, rows: list[list[int]], steps: int, temperature: float,
                 top_p: float, gen: torch.Generator | None) -> tuple[list[tuple], list[list]]:
    tokens, mask = left_pad(rows, PAD, model.tok_emb.weight.device)
    cache = KVCache.empty(model.config.n_layers)
    done = torch.zeros(len(rows), dtype=torch.bool, device=tokens.device)
    out: list[tuple[list, list, list]] = [([], [], []) for _ in rows]
    prompt_routes: list[list] = []
    for _ in range(steps):
        o = model(tokens, pad_mask=mask, cache=cache)
        if not prompt_routes:  # the prefill: routing of every (left-padded) prompt position
            width = tokens.shape[1]
            prompt_routes = [o.routed_experts[i, width - len(r):].tolist()
                             for i, r in enumerate(rows)]
        logp = sampling_logprobs(o.logits[:, -1], temperature, top_p)
        if temperature == 0.0:
            nxt = logp.argmax(-1)
        else:
            nxt = torch.multinomial(logp.exp(), 1, generator=gen).squeeze(1)
        lp = logp.gather(1, nxt.unsqueeze(1)).squeeze(1)
        routes = o.routed_experts[:, -1]  # (B, L, k)
        for i in torch.nonzero(~done).flatten().tolist():
            out[i][0].append(int(nxt[i]))
            out[i][1].append(float(lp[i]))
            out[i][2].append(routes[i].tolist())
        done |= nxt == EOS
        if bool(done.all()):
            break
        tokens, mask = nxt.unsqueeze(1), torch.ones_like(nxt, dtype=torch.bool).unsqueeze(1)
    return out, prompt_routes


def _finish(ids: list[int], lps: list[float], routes: list, prompt_tokens: int) -> Generation:
    stopped = bool(ids) and ids[-1] == EOS
    text = decode(ids[:-1] if stopped else ids)
    return Generation(text, ids, lps, routes, "stop" if stopped else "length", prompt_tokens)

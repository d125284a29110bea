"""The HF decode loop and the engine's HF session: a row that finishes leaves the batch (later
forwards see fewer rows), greedy tokens equal a batch-of-one decode, and sampled tokens carry the
logprob the model gives them under the sampling temperature (the same distribution)."""

import asyncio
import contextlib

import pytest
import torch

from deploy.replica.engines.base import SamplingRequest
from deploy.replica.engines.hf_step import HFStepModel
from deploy.replica.engines.torch_engine import TorchEngine

PROMPTS = ["def add(a, b):", "x = 1\ny =", "# sort a list\ndef sort_list(xs):\n    return",
           "class Stack:"]
FAMILIES = [("llama", {"experts": 0}), ("qwen3_moe", {}), ("mixtral", {})]


@contextlib.contextmanager
def _batch_sizes(policy):
    """The batch size of every forward of ``policy`` inside the block."""
    sizes: list[int] = []
    handle = policy.module.register_forward_pre_hook(
        lambda mod, args, kwargs: sizes.append(int(kwargs["input_ids"].shape[0])),
        with_kwargs=True)
    try:
        yield sizes
    finally:
        handle.remove()


def _long_enough(text: str) -> bool:
    return len(text) >= 12


@pytest.mark.parametrize(("family", "spec"), FAMILIES)
def test_finished_rows_leave_the_batch_and_greedy_matches_one_by_one(tiny_hf, family, spec):
    policy = tiny_hf(family, **spec)
    ids = [policy.encode_prompt(p) for p in PROMPTS]
    alone = [policy.generate([p], max_new_tokens=24, temperature=0.0, stop_when=_long_enough)[0]
             for p in ids]
    with _batch_sizes(policy) as sizes:
        batched = policy.generate(ids, max_new_tokens=24, temperature=0.0,
                                  stop_when=_long_enough)
    lengths = sorted({len(s.token_ids) for s in batched})
    assert len(lengths) > 1, "the rows should finish at different steps for this check"
    # one forward per step; after the shortest row ends, the batch shrinks
    assert sizes[0] == len(PROMPTS)
    assert sizes[lengths[0]] < len(PROMPTS)
    assert sizes == sorted(sizes, reverse=True)
    assert len(sizes) == lengths[-1]
    for a, b in zip(alone, batched):
        assert b.token_ids == a.token_ids
        assert b.text == a.text
        assert b.finish_reason == a.finish_reason
        assert b.routed_experts == a.routed_experts
        assert b.prompt_routed_experts == a.prompt_routed_experts
        assert b.logprobs == pytest.approx(a.logprobs, abs=1e-4)


@pytest.mark.parametrize(("family", "spec"), FAMILIES[:2])
def test_sampled_tokens_carry_the_models_tempered_logprob(tiny_hf, family, spec):
    policy = tiny_hf(family, **spec)
    ids = [policy.encode_prompt(p) for p in PROMPTS]
    out = policy.generate(ids, max_new_tokens=16, temperature=0.7, seed=3,
                          stop_when=_long_enough)
    for s in out:
        seq = torch.tensor([s.prompt_token_ids + s.token_ids])
        x, y = seq[:, :-1], seq[:, 1:]
        with torch.no_grad():
            lp = policy.token_logprobs(x, y, torch.ones_like(x, dtype=torch.bool),
                                       torch.tensor([0.7])).logprobs[0]
        n = len(s.token_ids)
        assert s.logprobs == pytest.approx(lp[-n:].tolist(), abs=1e-4)


def test_engine_session_drops_finished_rows_and_matches_the_policy(tiny_hf):
    policy = tiny_hf("qwen3_moe")
    step = HFStepModel(policy, 1)
    budgets = [3, 9, 5, 14]
    engine = TorchEngine(lambda: step, max_batch=8, max_wait_ms=50.0)
    engine.start()
    try:
        reqs = [SamplingRequest(prompt=p, max_tokens=b, temperature=0.0)
                for p, b in zip(PROMPTS, budgets)]
        with _batch_sizes(policy) as sizes:
            results = asyncio.run(engine.generate(reqs))
    finally:
        engine.close()
    assert engine.batches == 1
    assert sizes[0] == len(PROMPTS) and sizes[-1] == 1
    assert sizes == sorted(sizes, reverse=True)
    for p, b, r in zip(PROMPTS, budgets, results):
        ref = policy.generate([policy.encode_prompt(p)], max_new_tokens=b, temperature=0.0)[0]
        assert r.token_ids == ref.token_ids
        assert r.routed_experts == ref.routed_experts
        assert r.prompt_routed_experts == ref.prompt_routed_experts

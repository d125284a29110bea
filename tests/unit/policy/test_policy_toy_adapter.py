"""The toy behind the Policy interface gives exactly the numbers of the toy's own paths."""

import torch

from policy.base import Policy
from policy.config import checkpoint_format
from policy.loader import load_policy
from policy.toy.adapter import ToyPolicy
from policy.toy.generate import encode_prompt, generate
from trainer.data import Sample, collate
from trainer.recipe import policy_logprobs

PROMPTS = ["# evaluate\n1+2 = ", "def f(a):\n    return ", "x"]


def _batch(model, replay: bool):
    gens = generate(model, PROMPTS, max_new_tokens=10, temperature=1.0, seed=3)
    samples = [Sample(encode_prompt(p), g.token_ids, g.logprobs, g.routed_experts if replay else [],
                      1.0, "arith", p, 1, t) for p, g, t in zip(PROMPTS, gens, (1.0, 0.7, 1.3))]
    c = model.config
    return collate(samples, n_layers=c.n_layers, top_k=c.top_k)


def _direct(model, batch, replay: bool):
    """The recipe's log-probs as computed before the plug: the toy's forward, then one full
    log-softmax of logits / T."""
    out = model(batch.tokens, pad_mask=batch.pad_mask, right_padded=True,
                replay_experts=batch.replay if replay else None, replay_min_ratio=0.1)
    logits = out.logits.float() / batch.temperature.view(-1, 1, 1)
    return torch.log_softmax(logits, -1).gather(-1, batch.targets.unsqueeze(-1))[..., 0], out


def test_token_logprobs_equal_the_direct_toy_path(tiny_model):
    policy = ToyPolicy(tiny_model, logprob_chunk=4)  # several chunks
    assert isinstance(policy, Policy)
    for replay in (False, True):
        batch = _batch(tiny_model, replay)
        want, out = _direct(tiny_model, batch, replay)
        got, plug_out = policy_logprobs(policy, batch, replay=replay, replay_min_ratio=0.1)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        assert torch.equal(plug_out.routed_experts, out.routed_experts)
        assert torch.equal(plug_out.aux_loss, out.aux_loss)
        assert plug_out.replay_replaced == out.replay_replaced


def test_generate_equals_toy_generate(tiny_model):
    policy = ToyPolicy(tiny_model)
    want = generate(tiny_model, PROMPTS, max_new_tokens=12, temperature=0.8, top_p=0.9, seed=5)
    got = policy.generate([policy.encode_prompt(p) for p in PROMPTS], max_new_tokens=12,
                          temperature=0.8, top_p=0.9, seed=5)
    for g, w, p in zip(got, want, PROMPTS):
        assert (g.token_ids, g.logprobs, g.routed_experts, g.text, g.finish_reason) == (
            w.token_ids, w.logprobs, w.routed_experts, w.text, w.finish_reason)
        assert g.prompt_token_ids == encode_prompt(p)
        assert len(g.prompt_routed_experts) == len(g.prompt_token_ids)


def test_prompt_routes_are_the_teacher_forced_routing(tiny_model):
    policy = ToyPolicy(tiny_model)
    ids = policy.encode_prompt(PROMPTS[1])
    (g,) = policy.generate([ids], max_new_tokens=3, temperature=0.0)
    assert g.prompt_routed_experts == tiny_model(torch.tensor([ids])).routed_experts[0].tolist()
    assert g.prompt_routed_experts[-1] == g.routed_experts[0]


def test_save_load_roundtrip_detects_toy(tiny_model, tmp_path):
    ToyPolicy(tiny_model).save(tmp_path / "ck", metadata={"model_version": 3})
    assert checkpoint_format(tmp_path / "ck") == "toy"
    loaded = load_policy(tmp_path / "ck")
    assert isinstance(loaded, ToyPolicy)
    assert loaded.moe_spec.moe_layers == (0, 1) and loaded.moe_spec.gate_norm.endswith("renorm")
    for a, b in zip(loaded.module.state_dict().values(), tiny_model.state_dict().values()):
        assert torch.equal(a, b)

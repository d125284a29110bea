"""HF policies: router replay reproduces each family's routing exactly, forced experts change the
output, the plausibility threshold holds, dense layers between MoE layers and dense models work,
generation records what the trainer recomputes."""

import pytest
import torch

from policy.base import Policy, chunked_logprobs

MOE = [("qwen3_moe", {"norm_topk_prob": True}), ("qwen3_moe", {"norm_topk_prob": False}),
       ("olmoe", {}), ("mixtral", {}), ("qwen2_moe", {})]
TEXTS = ["def f(x):\n    return x * 2", "# evaluate\n3+4 = 7"]


def _batch(policy, texts=TEXTS):
    """Right-padded (input, target, mask, temperature) for whole texts."""
    rows = [policy.encode_prompt(t) for t in texts]
    width = max(len(r) for r in rows) - 1
    pad = policy.tokenizer_info.pad_id
    x = torch.full((len(rows), width), pad)
    y = torch.full((len(rows), width), pad)
    for i, r in enumerate(rows):
        x[i, : len(r) - 1], y[i, : len(r) - 1] = torch.tensor(r[:-1]), torch.tensor(r[1:])
    mask = torch.zeros_like(x, dtype=torch.bool)
    for i, r in enumerate(rows):
        mask[i, : len(r) - 1] = True
    return x, y, mask, torch.tensor([1.0, 0.7])


def _lp(policy, replay=None, ratio=0.1):
    x, y, mask, temp = _batch(policy)
    with torch.no_grad():
        return policy.token_logprobs(x, y, mask, temp, replay_experts=replay,
                                     replay_min_ratio=ratio)


@pytest.mark.parametrize(("family", "spec"), MOE)
def test_replay_of_own_choice_is_exact(tiny_hf, family, spec):
    policy = tiny_hf(family, **spec)
    assert isinstance(policy, Policy)
    assert policy.moe_spec.family == family and policy.moe_spec.n_moe_layers == 2
    free = _lp(policy)
    forced = _lp(policy, replay=free.routed_experts)
    assert forced.replay_replaced == 0
    assert torch.equal(forced.routed_experts, free.routed_experts)
    torch.testing.assert_close(forced.logprobs, free.logprobs, rtol=0, atol=0)
    torch.testing.assert_close(forced.aux_loss, free.aux_loss, rtol=0, atol=0)
    assert torch.isfinite(free.logprobs).all()


def test_gate_norm_follows_the_family(tiny_hf):
    assert tiny_hf("qwen3_moe", norm_topk_prob=True).moe_spec.gate_norm == "softmax_topk_renorm"
    assert tiny_hf("qwen3_moe", norm_topk_prob=False).moe_spec.gate_norm == "softmax_topk"
    assert tiny_hf("mixtral").moe_spec.gate_norm == "topk_softmax"


@pytest.mark.parametrize(("family", "spec"), MOE[:1] + MOE[2:3])
def test_other_experts_change_logprobs_and_threshold_holds(tiny_hf, family, spec):
    policy = tiny_hf(family, **spec)
    free = _lp(policy)
    e = policy.moe_spec.n_experts
    other = (free.routed_experts + 1) % e  # a valid, different set of experts
    other = torch.where(other[..., :1] == other[..., 1:], (other + 1) % e, other)
    forced = _lp(policy, replay=other, ratio=0.0)  # no threshold: all forced experts are used
    assert torch.equal(forced.routed_experts, other)
    assert not torch.allclose(forced.logprobs, free.logprobs)
    strict = _lp(policy, replay=other, ratio=1.0)  # only the router's own top-k are plausible
    assert strict.replay_replaced > 0
    assert torch.equal(strict.routed_experts.sort(-1).values,
                       free.routed_experts.sort(-1).values)
    torch.testing.assert_close(strict.logprobs, free.logprobs, rtol=1e-6, atol=1e-6)


def test_missing_routes_fall_back_to_the_router(tiny_hf):
    policy = tiny_hf("olmoe")
    free = _lp(policy)
    forced = _lp(policy, replay=torch.full_like(free.routed_experts, -1))
    assert forced.replay_replaced == 0
    torch.testing.assert_close(forced.logprobs, free.logprobs, rtol=0, atol=0)


def test_dense_layers_between_moe_layers(tiny_hf):
    policy = tiny_hf("qwen3_moe", layers=3, mlp_only_layers=(1,))
    assert policy.moe_spec.moe_layers == (0, 2) and policy.moe_spec.n_layers == 3
    free = _lp(policy)
    assert free.routed_experts.shape[2:] == (2, 2)
    forced = _lp(policy, replay=free.routed_experts)
    torch.testing.assert_close(forced.logprobs, free.logprobs, rtol=0, atol=0)
    sparse = tiny_hf("qwen3_moe", layers=4, decoder_sparse_step=2)
    assert sparse.moe_spec.moe_layers == (1, 3)


def test_dense_model_has_no_experts(tiny_hf):
    policy = tiny_hf("llama")
    assert not policy.moe_spec.is_moe and policy.routed_experts_source == "none"
    out = _lp(policy, replay=torch.zeros(2, 3, 0, 0, dtype=torch.long))
    assert out.routed_experts.shape[2:] == (0, 0) and float(out.aux_loss) == 0.0
    (g,) = policy.generate([policy.encode_prompt(TEXTS[0])], max_new_tokens=4, temperature=1.0,
                           seed=0)
    assert g.routed_experts == [] and g.prompt_routed_experts == [] and len(g.token_ids) == 4


@pytest.mark.parametrize("family", ["qwen3_moe", "mixtral"])
def test_generate_records_what_a_teacher_forced_pass_recomputes(tiny_hf, family):
    policy = tiny_hf(family)
    prompts = [policy.encode_prompt(t) for t in ("def f(x):\n    return ", "# evaluate\n1")]
    gens = policy.generate(prompts, max_new_tokens=6, temperature=0.9, seed=2)
    for p, g in zip(prompts, gens):
        assert g.prompt_token_ids == p and len(g.prompt_routed_experts) == len(p)
        seq = torch.tensor([p + g.token_ids])
        x, y = seq[:, :-1], seq[:, 1:]
        with torch.no_grad():
            out = policy.token_logprobs(x, y, torch.ones_like(x, dtype=torch.bool),
                                        torch.tensor([0.9]))
        n = len(p)
        torch.testing.assert_close(out.logprobs[0, n - 1:], torch.tensor(g.logprobs),
                                   rtol=0, atol=1e-4)
        assert out.routed_experts[0, n - 1:].tolist() == g.routed_experts
        assert out.routed_experts[0, : n - 1].tolist() == g.prompt_routed_experts[:-1]


def test_top_p_logprobs_are_renormalised(tiny_hf):
    policy = tiny_hf("olmoe")
    p = [policy.encode_prompt("def g(y):\n")]
    full = policy.generate(p, max_new_tokens=5, temperature=1.0, seed=4)[0]
    nucleus = policy.generate(p, max_new_tokens=5, temperature=1.0, top_p=0.5, seed=4)[0]
    # the first token's distribution is the same; top-p only removes mass and renormalises
    if nucleus.token_ids[0] == full.token_ids[0]:
        assert nucleus.logprobs[0] > full.logprobs[0]
    assert all(lp <= 0 for lp in nucleus.logprobs)


def test_chunked_logprobs_match_unchunked_with_gradients(tiny_hf):
    policy = tiny_hf("qwen3_moe")
    x, y, mask, temp = _batch(policy)
    head = policy.module.lm_head
    grads = []
    for chunk in (3, 10_000):
        policy.module.zero_grad()
        hidden = policy.module.model(input_ids=x, attention_mask=mask.long()).last_hidden_state
        lp = chunked_logprobs(hidden, y, temp, head=head, chunk=chunk)
        lp[mask].sum().backward()
        grads.append((lp.detach(), head.weight.grad.clone(),
                      policy.module.model.layers[0].mlp.gate.weight.grad.clone()))
    torch.testing.assert_close(grads[0][0], grads[1][0], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(grads[0][1], grads[1][1], rtol=1e-5, atol=1e-6)
    assert grads[0][2].abs().sum() > 0  # the router learns through the gate weights


def test_replayed_forward_trains_the_router(tiny_hf):
    policy = tiny_hf("olmoe", seed=1)
    x, y, mask, temp = _batch(policy)
    with torch.no_grad():
        routes = policy.token_logprobs(x, y, mask, temp).routed_experts
    policy.module.zero_grad()
    out = policy.token_logprobs(x, y, mask, temp, replay_experts=routes)
    (out.logprobs[mask].sum() + out.aux_loss).backward()
    assert policy.module.model.layers[1].mlp.gate.weight.grad.abs().sum() > 0


def test_save_and_load_roundtrip(tiny_hf, tmp_path):
    from policy.config import checkpoint_format
    from policy.loader import load_policy

    policy = tiny_hf("qwen3_moe", layers=3, mlp_only_layers=(1,))
    policy.save(tmp_path / "ck", metadata={"model_version": 2})
    assert checkpoint_format(tmp_path / "ck") == "hf"
    loaded = load_policy(tmp_path / "ck")
    assert loaded.describe()["model_type"] == "qwen3_moe"
    assert loaded.moe_spec == policy.moe_spec
    torch.testing.assert_close(_lp(loaded).logprobs, _lp(policy).logprobs, rtol=0, atol=0)


def test_replay_of_the_wrong_shape_is_refused(tiny_hf):
    policy = tiny_hf("olmoe")
    x, y, mask, temp = _batch(policy)
    with pytest.raises(ValueError, match="replay_experts has shape"):
        policy.token_logprobs(x, y, mask, temp,
                              replay_experts=torch.zeros(*x.shape, 3, 2, dtype=torch.long))


def test_chat_template_is_applied_when_configured(tiny_hf):
    policy = tiny_hf("llama")
    tok = policy.tokenizer
    tok.chat_template = "{% for m in messages %}<|bos|>user: {{ m['content'] }}\n{% endfor %}" \
                        "assistant:"
    try:
        assert policy.encode_prompt("hi") == tok("hi")["input_ids"]
        policy.chat_template = True
        assert policy.decode(policy.encode_prompt("hi")) == "user: hi\nassistant:"
    finally:
        policy.chat_template, tok.chat_template = False, None


@pytest.mark.parametrize("family", ["qwen3_moe", "llama"])
def test_teacher_forced_routes_equal_the_sampled_ones(tiny_hf, family):
    from policy.base import teacher_forced_routes

    policy = tiny_hf(family)
    ids = policy.encode_prompt("def f(x):\n    return ")
    (g,) = policy.generate([ids], max_new_tokens=6, temperature=1.0, seed=7)
    prompt_routes, routes = teacher_forced_routes(policy, ids, g.token_ids)
    assert prompt_routes == g.prompt_routed_experts and routes == g.routed_experts


def test_stop_when_ends_a_row_once_its_text_satisfies_it(tiny_hf):
    policy = tiny_hf("llama")
    prompts = [policy.encode_prompt("def f(x):\n"), policy.encode_prompt("# add\n")]
    full = policy.generate(prompts, max_new_tokens=8, temperature=0.0)
    cut = policy.generate(prompts, max_new_tokens=8, temperature=0.0,
                          stop_when=lambda text: len(text) >= 3)
    for f, c in zip(full, cut):
        n = len(c.token_ids)
        assert c.token_ids == f.token_ids[:n] and c.logprobs == f.logprobs[:n]
        assert len(c.text) >= 3 and len(policy.decode(c.token_ids[:-1])) < 3
        assert c.finish_reason == "stop"

import pytest
import torch

from policy.toy.generate import encode_prompt, generate, sampling_logprobs
from policy.toy.tokenizer import EOS


def _recompute(model, prompt, g, temperature):
    ids = encode_prompt(prompt) + g.token_ids
    out = model(torch.tensor([ids]))
    p = g.prompt_tokens
    logits = out.logits[0, p - 1 : len(ids) - 1]
    logits = logits / temperature if temperature > 0 else logits
    lp = torch.log_softmax(logits, -1).gather(-1, torch.tensor(g.token_ids)[:, None])[:, 0]
    return lp, out.routed_experts[0, p - 1 : len(ids) - 1]


@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0])
def test_logprobs_and_routes_match_recomputed_forward(tiny_model, temperature):
    prompts = ["# evaluate\n1+2 = ", "def f(a):\n    return ", "x"]
    gens = generate(tiny_model, prompts, max_new_tokens=12, temperature=temperature, seed=1)
    for prompt, g in zip(prompts, gens):
        assert g.prompt_tokens == len(encode_prompt(prompt))
        assert len(g.token_ids) == len(g.logprobs) == len(g.routed_experts)
        lp, routes = _recompute(tiny_model, prompt, g, temperature)
        assert torch.allclose(lp, torch.tensor(g.logprobs), atol=1e-4)
        assert routes.tolist() == g.routed_experts


def test_seeded_sampling_is_reproducible(tiny_model):
    a = generate(tiny_model, ["ab", "cd"], max_new_tokens=8, temperature=1.0, seed=3)
    b = generate(tiny_model, ["ab", "cd"], max_new_tokens=8, temperature=1.0, seed=3)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]


def test_greedy_is_argmax_and_length_finish(tiny_model):
    g = generate(tiny_model, ["hello"], max_new_tokens=5, temperature=0.0, seed=None)[0]
    if EOS not in g.token_ids:
        assert g.finish_reason == "length" and len(g.token_ids) == 5
    assert all(lp <= 0 for lp in g.logprobs)


def test_top_p_renormalises():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    lp = sampling_logprobs(logits, 1.0, 0.7)
    p = lp.exp()
    assert torch.isclose(p.sum(), torch.tensor(1.0))
    assert p[0, 2] == 0 and p[0, 3] == 0 and p[0, 1] > 0  # 0.665 < 0.7 -> keep two


def test_stop_excludes_eos_from_text(tiny_model):
    head = torch.nn.Linear(tiny_model.config.d_model, tiny_model.config.vocab_size)
    with torch.no_grad():
        head.weight.zero_()
        head.bias.zero_()
        head.bias[EOS] = 10.0
    tiny_model.lm_head = head
    g = generate(tiny_model, ["q"], max_new_tokens=4, temperature=0.0, seed=0)[0]
    assert g.finish_reason == "stop" and g.token_ids == [EOS] and g.text == ""


def test_bad_arguments(tiny_model):
    with pytest.raises(ValueError):
        generate(tiny_model, ["a"], max_new_tokens=2, temperature=-1.0, seed=0)
    with pytest.raises(ValueError, match="max_seq_len"):
        generate(tiny_model, ["a" * 400], max_new_tokens=2, temperature=1.0, seed=0)

"""Sparse upcycling: the MoE equals the dense model at init (experts are copies, gates sum to 1),
whatever its routers say; it saves as an HF directory that loads as a policy of the MoE family."""

import pytest
import torch

from policy.config import PolicyLoadError, TinyHFSpec
from policy.loader import load_policy
from policy.tiny import build_model
from policy.upcycle import main, upcycle_model

TEXTS = ["def f(x):\n    return x * 2", "# evaluate\n3+4 = 7"]


def _logits(model, tok):
    enc = tok(TEXTS, return_tensors="pt", padding=True)
    with torch.no_grad():
        return model(**enc).logits, enc["attention_mask"].bool()


@pytest.mark.parametrize(("family", "target"), [("llama", "mixtral"), ("qwen3", "qwen3_moe"),
                                                ("qwen2", "qwen2_moe")])
def test_upcycled_moe_equals_the_dense_model(bpe_tokenizer, family, target):
    dense, tok = build_model(TinyHFSpec(family=family, vocab=384), bpe_tokenizer)
    moe = upcycle_model(dense, experts=4, top_k=2, router_std=1.0, seed=3)  # a loud router
    assert moe.config.model_type == target
    want, mask = _logits(dense, tok)
    got, _ = _logits(moe, tok)
    torch.testing.assert_close(got[mask], want[mask], rtol=1e-5, atol=1e-5)
    gate = moe.model.layers[0].mlp.gate.weight
    assert gate.std() > 0.5  # the routers are not degenerate: they do route differently


def test_without_renormalised_gates_it_would_differ(bpe_tokenizer):
    dense, tok = build_model(TinyHFSpec(family="qwen3", vocab=384), bpe_tokenizer)
    moe = upcycle_model(dense, experts=4, top_k=2, router_std=1.0)
    moe.config.norm_topk_prob = False
    for layer in moe.model.layers:
        layer.mlp.gate.norm_topk_prob = False
    want, mask = _logits(dense, tok)
    got, _ = _logits(moe, tok)
    assert not torch.allclose(got[mask], want[mask], atol=1e-3)


def test_cli_writes_a_loadable_moe_directory(bpe_tokenizer, tmp_path):
    dense, tok = build_model(TinyHFSpec(family="llama", vocab=384), bpe_tokenizer)
    dense.save_pretrained(tmp_path / "dense")
    tok.save_pretrained(tmp_path / "dense")
    main([str(tmp_path / "dense"), str(tmp_path / "moe"), "--experts", "4", "--top-k", "2"])
    assert (tmp_path / "moe" / "model.safetensors").exists()
    assert (tmp_path / "moe" / "tokenizer.json").exists()
    policy = load_policy(tmp_path / "moe")
    assert policy.describe()["model_type"] == "mixtral"
    assert policy.moe_spec.n_experts == 4 and policy.moe_spec.top_k == 2
    want, mask = _logits(dense, tok)
    got, _ = _logits(policy.module, policy.tokenizer)
    torch.testing.assert_close(got[mask], want[mask], rtol=1e-5, atol=1e-5)


def test_refuses_a_family_it_cannot_upcycle(bpe_tokenizer):
    moe, _ = build_model(TinyHFSpec(family="olmoe", vocab=384), bpe_tokenizer)
    with pytest.raises(PolicyLoadError, match="model_type.*olmoe"):
        upcycle_model(moe, experts=4, top_k=2)
    dense, _ = build_model(TinyHFSpec(family="llama", vocab=384), bpe_tokenizer)
    with pytest.raises(ValueError, match="top_k"):
        upcycle_model(dense, experts=2, top_k=3)

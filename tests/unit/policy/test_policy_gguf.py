"""A GGUF directory loads as an HF policy (``gguf_file=``) and upcycles: a tiny Llama written as
GGUF with the ``gguf`` package (llama.cpp's tensor names and q/k permutation) reads back with the
same logits and tokenizer."""

import json

import pytest
import torch

from policy.config import TinyHFSpec, checkpoint_format
from policy.loader import load_policy
from policy.tiny import build_model


def _permute(w, n_head):
    """llama.cpp's rotary layout of q/k rows (transformers undoes it when reading)."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def _write_gguf(model, tok, path):
    import gguf

    c = model.config
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(c.num_hidden_layers)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_rope_dimension_count(c.hidden_size // c.num_attention_heads)
    w.add_rope_freq_base(c.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_vocab_size(c.vocab_size)
    bpe = json.loads(tok.backend_tokenizer.to_str())["model"]
    tokens = sorted(bpe["vocab"], key=bpe["vocab"].get)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in bpe["merges"]])
    w.add_token_types([3 if t.startswith("<|") else 1 for t in tokens])
    w.add_bos_token_id(tok.bos_token_id)
    w.add_eos_token_id(tok.eos_token_id)
    w.add_pad_token_id(tok.pad_token_id)
    w.add_add_bos_token(True)
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    w.add_tensor("output.weight", sd["lm_head.weight"])
    names = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
             "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
             "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
    for i in range(c.num_hidden_layers):
        p = f"model.layers.{i}."
        for g, h in names.items():
            w.add_tensor(f"blk.{i}.{g}.weight", sd[p + h + ".weight"])
        w.add_tensor(f"blk.{i}.attn_q.weight",
                     _permute(sd[p + "self_attn.q_proj.weight"], c.num_attention_heads))
        w.add_tensor(f"blk.{i}.attn_k.weight",
                     _permute(sd[p + "self_attn.k_proj.weight"], c.num_key_value_heads))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.fixture(scope="module")
def gguf_dir(bpe_tokenizer, tmp_path_factory):
    model, tok = build_model(TinyHFSpec(family="llama", vocab=384), bpe_tokenizer)
    d = tmp_path_factory.mktemp("gguf")
    _write_gguf(model, tok, d / "tiny.gguf")
    return d, model, tok


def test_gguf_dir_loads_with_the_same_logits_and_tokenizer(gguf_dir):
    d, model, tok = gguf_dir
    assert checkpoint_format(d) == "gguf"
    policy = load_policy(d)
    assert policy.describe()["model_type"] == "llama" and not policy.moe_spec.is_moe
    text = "def f(x):\n    return x * 2"
    assert policy.encode_prompt(text) == tok(text)["input_ids"]
    x = torch.tensor([tok(text)["input_ids"]])
    with torch.no_grad():
        torch.testing.assert_close(policy.module(x).logits, model(x).logits, rtol=0, atol=1e-5)


def test_gguf_upcycles_to_an_equal_mixtral(gguf_dir, tmp_path):
    from policy.upcycle import upcycle

    d, model, tok = gguf_dir
    upcycle(d, tmp_path / "moe", experts=4, top_k=2, gguf_file="tiny.gguf", router_std=1.0)
    moe = load_policy(tmp_path / "moe")
    assert moe.describe()["model_type"] == "mixtral" and moe.moe_spec.n_experts == 4
    x = torch.tensor([tok("# evaluate\n3+4 = 7")["input_ids"]])
    with torch.no_grad():
        torch.testing.assert_close(moe.module(x).logits, model(x).logits, rtol=1e-5, atol=1e-5)


def test_the_conversion_is_cached_by_the_files_content(gguf_dir, tmp_path, monkeypatch):
    from policy import hf_checks

    d, model, tok = gguf_dir
    monkeypatch.setenv("RATCHET_GGUF_CACHE", str(tmp_path / "cache"))
    target = hf_checks.converted_gguf_dir(d / "tiny.gguf")
    assert not target.exists()
    first = load_policy(d)
    assert (target / "config.json").is_file()  # the first load wrote the converted model
    reads = []
    monkeypatch.setattr(hf_checks, "_read_gguf", lambda *a: reads.append(a))
    second = load_policy(d)  # read from the cache: the GGUF is not de-quantised again
    assert reads == [] and second.describe()["model_type"] == "llama"
    x = torch.tensor([tok("def f(x):\n    return x * 2")["input_ids"]])
    with torch.no_grad():
        torch.testing.assert_close(second.module(x).logits, first.module(x).logits, rtol=0,
                                   atol=0)
    assert second.encode_prompt("x = 1") == first.encode_prompt("x = 1")
    # another file's bytes, another cache entry
    other = tmp_path / "other"
    other.mkdir()
    data = (d / "tiny.gguf").read_bytes()
    (other / "tiny.gguf").write_bytes(data + b"\0")
    assert hf_checks.converted_gguf_dir(other / "tiny.gguf") != target

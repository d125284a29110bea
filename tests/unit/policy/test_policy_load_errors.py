"""Bad model directories fail before anything loads, naming the file and the field."""

import json

import pytest

from policy.config import HFPolicyConfig, PolicyLoadError, TinyHFSpec
from policy.loader import load_policy
from policy.tiny import build_model


def _write_config(d, cfg):
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def _saved(tmp_path, bpe_tokenizer, family="qwen3_moe", name="m"):
    model, tok = build_model(TinyHFSpec(family=family, vocab=384), bpe_tokenizer)
    d = tmp_path / name
    model.save_pretrained(d)
    tok.save_pretrained(d)
    return d


def test_not_a_causal_lm(tmp_path):
    d = _write_config(tmp_path / "bert", {"model_type": "bert",
                                          "architectures": ["BertForMaskedLM"]})
    with pytest.raises(PolicyLoadError, match=r"config\.json.*'architectures'.*BertForMaskedLM"):
        load_policy(d)
    d = _write_config(tmp_path / "vit", {"model_type": "vit"})
    with pytest.raises(PolicyLoadError, match=r"config\.json.*'model_type' = 'vit'.*causal LM"):
        load_policy(d)


def test_unknown_moe_family(tmp_path):
    d = _write_config(tmp_path / "oss", {"model_type": "gpt_oss", "num_local_experts": 32,
                                         "architectures": ["GptOssForCausalLM"]})
    with pytest.raises(PolicyLoadError,
                       match=r"config\.json.*'model_type' = 'gpt_oss'.*unknown family"):
        load_policy(d)


def test_tokenizer_without_eos(tmp_path, bpe_tokenizer):
    d = _saved(tmp_path, bpe_tokenizer)
    path = d / "tokenizer_config.json"
    cfg = json.loads(path.read_text())
    cfg["eos_token"] = None
    path.write_text(json.dumps(cfg))
    with pytest.raises(PolicyLoadError, match=r"tokenizer_config\.json.*'eos_token'"):
        load_policy(d)


def test_gguf_that_does_not_parse(tmp_path):
    d = tmp_path / "gguf"
    d.mkdir()
    (d / "model.gguf").write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\xff" * 64)
    with pytest.raises(PolicyLoadError, match=r"model\.gguf.*not a valid GGUF"):
        load_policy(d)
    with pytest.raises(PolicyLoadError, match=r"other\.gguf.*'gguf_file'"):
        load_policy(HFPolicyConfig(path=d, gguf_file="other.gguf"))


def test_shapes_that_disagree_with_the_config(tmp_path, bpe_tokenizer):
    d = _saved(tmp_path, bpe_tokenizer)
    path = d / "config.json"
    cfg = json.loads(path.read_text())
    path.write_text(json.dumps({**cfg, "vocab_size": 999}))
    with pytest.raises(PolicyLoadError, match=r"model\.safetensors.*(lm_head|embed_tokens)"
                                              r".*\[384, 64\].*vocab_size=999"):
        load_policy(d)
    path.write_text(json.dumps({**cfg, "num_local_experts": 8}))  # the key HF saves
    with pytest.raises(PolicyLoadError, match=r"model\.safetensors.*'model\.layers\.0\.mlp"
                                              r"\.gate\.weight'.*experts=8"):
        load_policy(d)


def test_neither_format(tmp_path):
    with pytest.raises(PolicyLoadError, match="not a directory"):
        load_policy(tmp_path / "nope")
    d = _write_config(tmp_path / "toyish", {"d_model": 32})
    with pytest.raises(PolicyLoadError, match=r"config\.json.*'model_type' missing"):
        load_policy(d)
    (tmp_path / "empty").mkdir()
    with pytest.raises(PolicyLoadError, match="no config.json and no"):
        load_policy(tmp_path / "empty")


def test_config_union_rejects_bad_fields():
    from pydantic import TypeAdapter, ValidationError

    from policy.config import PolicyConfig

    ta = TypeAdapter(PolicyConfig)
    assert ta.validate_python({"type": "hf", "build": {"family": "olmoe"}}).build.family == "olmoe"
    assert ta.validate_python({"type": "toy", "path": "x"}).path.name == "x"
    for bad in ({"type": "hf"}, {"type": "hf", "build": {"family": "gpt2"}},
                {"type": "hf", "build": {"experts": 2, "top_k": 3}}, {"type": "tpu"}):
        with pytest.raises(ValidationError):
            ta.validate_python(bad)


def test_config_and_protocol_import_no_heavy_module():
    import subprocess
    import sys

    code = ("import sys, policy.config, policy.base, policy.upcycle, policy.tiny; "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"

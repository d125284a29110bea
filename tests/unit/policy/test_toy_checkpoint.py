import json

import torch

from policy.toy.checkpoint import load_checkpoint, load_metadata, save_checkpoint


def test_roundtrip_bit_exact(tiny_model, tmp_path):
    save_checkpoint(tiny_model, tmp_path / "ck", metadata={"model_version": 3})
    assert {p.name for p in (tmp_path / "ck").iterdir()} == {
        "model.safetensors", "config.json", "metadata.json"}
    loaded = load_checkpoint(tmp_path / "ck")
    assert loaded.config == tiny_model.config
    a, b = tiny_model.state_dict(), loaded.state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    x = torch.randint(0, 256, (2, 7))
    assert torch.equal(tiny_model(x).logits, loaded(x).logits)
    assert load_metadata(tmp_path / "ck") == {"model_version": 3}
    assert json.loads((tmp_path / "ck" / "config.json").read_text())["n_experts"] == 4


def test_weights_file_is_not_pickle(tiny_model, tmp_path):
    save_checkpoint(tiny_model, tmp_path)
    head = (tmp_path / "model.safetensors").read_bytes()[:16]
    assert not head.startswith(b"\x80")  # pickle protocol marker

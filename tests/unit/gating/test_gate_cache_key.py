"""The gate's suite-result cache key covers the whole checkpoint, config.json included."""

from __future__ import annotations

from gating.config import GateConfig
from gating.gate import suite_cache_key


def _ckpt(root, config: str):
    root.mkdir()
    (root / "model.safetensors").write_bytes(b"same weights")
    (root / "config.json").write_text(config)
    (root / "metadata.json").write_text("{}")
    return root


def test_same_weights_other_config_is_another_cache_entry(tmp_path):
    cfg = GateConfig()
    a = _ckpt(tmp_path / "a", '{"n_layers": 4}')
    b = _ckpt(tmp_path / "b", '{"n_layers": 2}')
    c = _ckpt(tmp_path / "c", '{"n_layers": 4}')
    assert suite_cache_key(cfg, a) != suite_cache_key(cfg, b)
    assert suite_cache_key(cfg, a) == suite_cache_key(cfg, c)  # content, not the folder's name
    other = cfg.model_copy(update={"suite": cfg.suite.model_copy(update={"seed": 9})})
    assert suite_cache_key(other, a) != suite_cache_key(cfg, a)

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


def test_a_whole_pool_draw_is_one_cache_entry_across_decisions(tmp_path):
    """A suite the size of its pool draws the same tasks at every decision: a champion that
    stays champion is decoded once; a draw of part of a pool differs per decision."""
    from gating.config import SuiteConfig
    from gating.suite import build_suite

    ckpt = _ckpt(tmp_path / "a", '{"n_layers": 4}')
    whole = SuiteConfig(kind="jsonl", path="tasks/data/pyfuncs_gate.jsonl", size=10_000)
    cfg = GateConfig(suite=whole)
    keys = {suite_cache_key(cfg, ckpt, tasks=build_suite(whole, k)[0]) for k in (1, 2, 3)}
    assert len(keys) == 1
    part = whole.model_copy(update={"size": 40})
    cfg = GateConfig(suite=part)
    keys = {suite_cache_key(cfg, ckpt, tasks=build_suite(part, k)[0]) for k in (1, 2, 3)}
    assert len(keys) == 3

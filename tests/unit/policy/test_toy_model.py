import json
from pathlib import Path

import pytest
import torch

from policy.toy.model import MoEConfig, MoETransformer

CONFIGS = Path(__file__).parents[3] / "trainer" / "configs"


def test_shapes_and_routing(tiny_model):
    x = torch.randint(0, 256, (3, 11))
    out = tiny_model(x)
    c = tiny_model.config
    assert out.logits.shape == (3, 11, c.vocab_size)
    assert out.routed_experts.shape == (3, 11, c.n_layers, c.top_k)
    assert out.routed_experts.dtype == torch.long
    assert len(out.router_probs) == c.n_layers
    # top-k distinct experts, each the router's k most probable
    r = out.routed_experts
    assert (r[..., 0] != r[..., 1]).all()
    probs = out.router_probs[0]
    top = probs.topk(c.top_k, -1).indices
    assert torch.equal(top.sort(-1).values, r[:, :, 0].sort(-1).values)
    assert out.aux_loss.ndim == 0 and out.aux_loss > 0


def test_causal(tiny_model):
    x = torch.randint(0, 256, (1, 10))
    y = x.clone()
    y[0, 7:] = 5
    a, b = tiny_model(x).logits, tiny_model(y).logits
    assert torch.allclose(a[:, :7], b[:, :7], atol=1e-5)


def test_left_padding_matches_unpadded(tiny_model):
    x = torch.randint(0, 256, (1, 9))
    padded = torch.cat([torch.full((1, 4), 258), x], 1)
    mask = torch.cat([torch.zeros(1, 4, dtype=torch.bool), torch.ones(1, 9, dtype=torch.bool)], 1)
    a = tiny_model(x).logits
    b = tiny_model(padded, pad_mask=mask).logits[:, 4:]
    assert torch.allclose(a, b, atol=1e-5)


def test_load_balance_loss_gets_router_gradients(tiny_model):
    out = tiny_model(torch.randint(0, 256, (2, 8)))
    out.aux_loss.backward()
    g = tiny_model.blocks[0].ffn.router.weight.grad
    assert g is not None and g.abs().sum() > 0


def test_replay_of_own_routing_is_identity(tiny_model):
    x = torch.randint(0, 256, (2, 12))
    out = tiny_model(x)
    again = tiny_model(x, replay_experts=out.routed_experts)
    assert torch.allclose(out.logits, again.logits, atol=1e-6)
    assert again.replay_replaced == 0


def test_replay_forces_plausible_routes_and_replaces_implausible(tiny_model):
    x = torch.randint(0, 256, (1, 6))
    out = tiny_model(x)
    probs = out.router_probs[0][0]  # (T, E)
    order = probs.argsort(-1)  # ascending
    forced = torch.full_like(out.routed_experts, -1)
    # layer 0: the router's two *least* likely experts
    forced[0, :, 0] = order[:, :2]
    kept = tiny_model(x, replay_experts=forced, replay_min_ratio=0.0)
    assert torch.equal(kept.routed_experts[0, :, 0], order[:, :2])
    assert kept.replay_replaced == 0
    strict = tiny_model(x, replay_experts=forced, replay_min_ratio=1.0)
    assert strict.replay_replaced > 0
    r = strict.routed_experts[0, :, 0]
    assert (r[:, 0] != r[:, 1]).all()


def test_replay_gate_gradients_reach_router(tiny_model):
    x = torch.randint(0, 256, (1, 6))
    forced = tiny_model(x).routed_experts.flip(-1)
    tiny_model(x, replay_experts=forced).logits.sum().backward()
    assert tiny_model.blocks[1].ffn.router.weight.grad.abs().sum() > 0


def test_dense_variant_has_equal_active_params():
    moe = MoETransformer(MoEConfig())
    dense = MoETransformer(MoEConfig(ffn="dense"))
    c = moe.config
    router = c.n_layers * c.d_model * c.n_experts
    assert dense.num_params() == moe.num_params(active=True) - router


def test_config_validation():
    with pytest.raises(ValueError, match="n_heads"):
        MoEConfig(d_model=30, n_heads=4)
    with pytest.raises(ValueError, match="top_k"):
        MoEConfig(n_experts=2, top_k=3, )
    with pytest.raises(ValueError):
        MoEConfig(d_modle=8)


@pytest.mark.parametrize("path", sorted(CONFIGS.rglob("*.json")), ids=lambda p: p.name)
def test_shipped_configs_parse(path):
    MoEConfig.model_validate(json.loads(path.read_text()))


def test_toy_config_size():
    m = MoETransformer(MoEConfig.model_validate_json((CONFIGS / "toy.json").read_text()))
    assert 1_000_000 <= m.num_params() <= 3_000_000

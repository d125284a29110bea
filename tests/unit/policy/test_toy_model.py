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


# -- devices, attention, grouped experts ----------------------------------------------------

def _meta_model(cfg: MoEConfig) -> MoETransformer:
    with torch.device("meta"):  # bf16: the grouped GEMM's meta kernel (like CUDA's) wants it
        return MoETransformer(cfg).to(torch.bfloat16).train()


@pytest.mark.parametrize("right_padded", [True, False])
def test_meta_forward_backward_creates_nothing_off_device(tiny_model, off_device, right_padded):
    model = _meta_model(tiny_model.config)
    c = model.config
    tokens = torch.zeros(2, 12, dtype=torch.long, device="meta")
    pad = torch.ones(2, 12, dtype=torch.bool, device="meta")
    replay = torch.zeros(2, 12, c.n_layers, c.top_k, dtype=torch.long, device="meta")
    with off_device("meta") as seen:
        out = model(tokens, pad_mask=pad, replay_experts=replay, right_padded=right_padded)
        (out.logits.sum() + out.aux_loss).backward()
        unpadded = model(tokens)
    assert seen == []
    assert out.logits.shape == (2, 12, c.vocab_size) and out.logits.device.type == "meta"
    assert out.routed_experts.device.type == "meta" and unpadded.routed_experts.is_meta
    assert model.blocks[0].ffn.w_in.grad.is_meta  # the grouped GEMM ran (auto: bf16, not CPU)


def test_meta_model_runs_the_grouped_path(tiny_model):
    model = _meta_model(tiny_model.config)
    assert model.blocks[0].ffn.grouped(torch.device("meta"), torch.bfloat16)
    assert not model.blocks[0].ffn.grouped(torch.device("cpu"), torch.float32)
    assert not model.blocks[0].ffn.grouped(torch.device("cpu"), torch.bfloat16)
    model.set_expert_impl("loop")
    assert not model.blocks[0].ffn.grouped(torch.device("meta"), torch.bfloat16)


def _old_masks(model, tokens, pad_mask, cache, right_padded=None):
    """Reference copy of the attention mask before causal-only attention: always an explicit
    (B, 1, T, T) boolean mask when a pad mask is given."""
    b, t = tokens.shape
    full = pad_mask.bool()
    positions = (full.long().cumsum(1) - 1).clamp(min=0)
    q_pos = torch.arange(t).view(t, 1)
    k_pos = torch.arange(t).view(1, -1)
    allowed = (k_pos <= q_pos).unsqueeze(0) & full.unsqueeze(1)
    allowed = allowed | (k_pos == q_pos).unsqueeze(0)
    return allowed.unsqueeze(1), positions, full.reshape(-1)


def _right_padded_batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    lengths = [16, 9, 3, 12]
    tokens = torch.full((4, 16), 258, dtype=torch.long)
    pad = torch.zeros(4, 16, dtype=torch.bool)
    for i, n in enumerate(lengths):
        tokens[i, :n] = torch.randint(0, 256, (n,), generator=g)
        pad[i, :n] = True
    return tokens, pad


def test_right_padding_uses_causal_attention_without_mask(tiny_model):
    tokens, pad = _right_padded_batch()
    mask, _, _ = tiny_model._masks(tokens, pad, None)
    assert mask is None  # detected: is_causal=True, no explicit mask (flash on CUDA)
    left = pad.flip(1)
    assert tiny_model._masks(tokens.flip(1), left, None)[0] is not None


@pytest.mark.parametrize("right_padded", [True, None])
def test_causal_attention_equals_the_old_masked_attention(tiny_model, right_padded):
    tokens, pad = _right_padded_batch()
    replay = tiny_model(tokens, pad_mask=pad).routed_experts
    new = tiny_model(tokens, pad_mask=pad, right_padded=right_padded, replay_experts=replay)
    tiny_model._masks = lambda *a, **k: _old_masks(tiny_model, *a, **k)  # instance override
    old = tiny_model(tokens, pad_mask=pad, replay_experts=replay)
    assert torch.allclose(new.logits[pad], old.logits[pad], atol=1e-5, rtol=0)
    assert torch.equal(new.routed_experts[pad], old.routed_experts[pad])


def test_expert_offsets_match_bincount():
    from policy.toy.model import expert_offsets

    ids = torch.tensor([3, 0, 0, 5, 3, 3, 1, 0])
    offs = expert_offsets(ids.sort().values, 6)
    assert offs.dtype == torch.int32
    assert offs.tolist() == torch.bincount(ids, minlength=6).cumsum(0).tolist()
    assert expert_offsets(torch.tensor([2, 2]), 4).tolist() == [0, 0, 2, 2]  # empty experts


def test_grouped_ffn_matches_per_expert_reference():
    from policy.toy.model import expert_offsets, grouped_ffn

    g = torch.Generator().manual_seed(0)
    e, d, f = 4, 16, 24
    ids = torch.tensor([2, 2, 0, 3, 0, 2, 3, 3, 3]).sort().values  # expert 1 gets nothing
    xs = torch.randn(len(ids), d, generator=g)
    w_in, w_out = torch.randn(e, d, f, generator=g), torch.randn(e, f, d, generator=g)
    y = grouped_ffn(xs, w_in, w_out, expert_offsets(ids, e))
    ref = torch.stack([torch.nn.functional.gelu(x @ w_in[i]) @ w_out[i] for x, i in zip(xs, ids)])
    assert torch.allclose(y, ref, atol=1e-5)


@pytest.mark.parametrize("replay", [False, True])
def test_grouped_and_loop_experts_agree_on_outputs_and_gradients(tiny_model, replay):
    tokens, pad = _right_padded_batch(1)
    forced = tiny_model(tokens).routed_experts.flip(-1) if replay else None
    results = {}
    for impl in ("loop", "grouped"):
        tiny_model.zero_grad(set_to_none=True)
        tiny_model.set_expert_impl(impl)
        out = tiny_model(tokens, pad_mask=pad, replay_experts=forced)
        (out.logits[pad].logsumexp(-1).sum() + out.aux_loss).backward()
        results[impl] = (out, {n: p.grad.clone() for n, p in tiny_model.named_parameters()})
    (a, ga), (b, gb) = results["loop"], results["grouped"]
    assert torch.allclose(a.logits, b.logits, atol=1e-5, rtol=0)
    assert torch.equal(a.routed_experts, b.routed_experts)
    for name in ga:
        assert torch.allclose(ga[name], gb[name], atol=1e-5, rtol=1e-4), name


def test_bf16_autocast_on_cpu_runs_both_expert_paths(tiny_model):
    tokens, pad = _right_padded_batch(2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        a = tiny_model.set_expert_impl("loop")(tokens, pad_mask=pad).logits
        b = tiny_model.set_expert_impl("grouped")(tokens, pad_mask=pad).logits
    assert a.dtype == torch.float32 and torch.allclose(a[pad], b[pad], atol=0.05)


def test_checkpoint_layout_unchanged(tiny_model):
    """The grouped GEMM reads the stacked weights as stored: the checkpoint format (and so the
    cached champion and every registered candidate) is the one before it."""
    c = tiny_model.config
    shapes = {k: tuple(v.shape) for k, v in tiny_model.state_dict().items()}
    assert shapes["blocks.0.ffn.w_in"] == (c.n_experts, c.d_model, c.d_ff)
    assert shapes["blocks.0.ffn.w_out"] == (c.n_experts, c.d_ff, c.d_model)
    assert not any("impl" in k for k in shapes)

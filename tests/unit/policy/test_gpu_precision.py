"""What a first GPU run would meet, proven on the CPU: the HF weights' dtype default, fp32 logits
before every log-softmax under bf16 autocast, and the grouped expert GEMM's shape and dtype rules
(the per-expert loop runs where they fail)."""

import pytest
import torch
import torch.nn.functional as F

from policy.base import chunked_logprobs, fp32_logits
from policy.config import HFPolicyConfig, resolve_dtype
from policy.loader import load_policy
from policy.toy.model import MoEConfig, MoETransformer, grouped_mm_supported

# -- HFPolicyConfig.dtype ---------------------------------------------------------------------


def test_hf_dtype_defaults_to_auto_bf16_on_cuda_fp32_on_cpu():
    assert HFPolicyConfig(path="x").dtype == "auto"
    assert resolve_dtype("auto", cuda=True) == "bfloat16"
    assert resolve_dtype("auto", cuda=False) == "float32"
    assert resolve_dtype("float16", cuda=True) == "float16"


def test_auto_loads_bf16_weights_where_cuda_is_seen_and_the_override_wins(
        tiny_hf, tmp_path, monkeypatch):
    tiny_hf("qwen3_moe").save(tmp_path / "m")
    assert next(load_policy(tmp_path / "m").module.parameters()).dtype == torch.float32
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # only the dtype rule reads it
    assert next(load_policy(tmp_path / "m").module.parameters()).dtype == torch.bfloat16
    forced = load_policy(tmp_path / "m", dtype="float32")
    assert next(forced.module.parameters()).dtype == torch.float32


# -- fp32 logits ------------------------------------------------------------------------------


def _head_and_hidden(seed: int = 0, vocab: int = 300, d: int = 64):
    torch.manual_seed(seed)
    head = torch.nn.Linear(d, vocab, bias=False)
    hidden = torch.randn(2, 7, d) * 3
    return head, hidden


def test_fp32_logits_ignore_bf16_autocast():
    head, hidden = _head_and_hidden()
    exact = hidden @ head.weight.T
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = fp32_logits(head, hidden)
        rounded = head(hidden)  # what a bf16 projection gives
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, exact, rtol=0, atol=1e-5)
    assert (rounded.float() - exact).abs().max() > 1e-2  # the noise this removes


def test_chunked_logprobs_under_autocast_equal_the_fp32_ones():
    head, hidden = _head_and_hidden()
    targets = torch.randint(0, 300, (2, 7))
    temp = torch.tensor([1.0, 0.7])
    exact = chunked_logprobs(hidden, targets, temp, head=head, chunk=3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = chunked_logprobs(hidden, targets, temp, head=head, chunk=3)
    torch.testing.assert_close(got, exact, rtol=0, atol=1e-5)


def test_fp32_logits_carry_gradients_to_bf16_weights():
    head, hidden = _head_and_hidden()
    head = head.to(torch.bfloat16)
    h = hidden.to(torch.bfloat16).requires_grad_(True)
    fp32_logits(head, h).logsumexp(-1).sum().backward()
    assert head.weight.grad.dtype == torch.bfloat16 and h.grad is not None


def test_toy_logits_are_an_fp32_projection_under_autocast(tiny_model):
    seen = {}
    tiny_model.lm_head.register_forward_pre_hook(lambda m, a: seen.setdefault("h", a[0]))
    tokens = torch.randint(3, 200, (2, 10))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = tiny_model(tokens).logits
    exact = seen["h"].float() @ tiny_model.lm_head.weight.T
    torch.testing.assert_close(logits, exact, rtol=0, atol=1e-5)


def test_hf_logprobs_under_autocast_use_an_fp32_head(tiny_hf):
    policy = tiny_hf("qwen3_moe")
    ids = torch.randint(3, 300, (2, 9))
    pad = torch.ones_like(ids, dtype=torch.bool)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = policy.token_logprobs(ids, ids, pad, torch.ones(2), return_hidden=True,
                                    return_logits=True)
    head = policy.module.get_output_embeddings()
    exact = torch.log_softmax(out.hidden.float() @ head.weight.T, -1)
    torch.testing.assert_close(out.logits.log_softmax(-1), exact, rtol=0, atol=1e-5)
    torch.testing.assert_close(out.logprobs, exact.gather(-1, ids.unsqueeze(-1)).squeeze(-1),
                               rtol=0, atol=1e-5)


# -- the grouped expert GEMM -------------------------------------------------------------------


@pytest.mark.parametrize(("device", "dtype", "d", "f", "cap", "ok"), [
    ("cuda", torch.bfloat16, 1024, 2816, (9, 0), True),
    ("cuda", torch.bfloat16, 1024, 2820, (9, 0), False),  # 2820 x 2 bytes: not 16-aligned
    ("cuda", torch.bfloat16, 30, 64, (9, 0), False),
    ("cuda", torch.float32, 64, 128, (9, 0), False),  # fp32: not the grouped kernel
    ("cuda", torch.bfloat16, 64, 128, (7, 5), False),  # pre-Ampere
    ("cpu", torch.float32, 64, 128, None, True),
    ("cpu", torch.float32, 30, 44, None, False),
])
def test_grouped_mm_supported_rules(device, dtype, d, f, cap, ok):
    why = grouped_mm_supported(torch.device(device), dtype, d, f, capability=cap)
    assert (why == "") is ok, why


@pytest.mark.parametrize(("d", "f"), [(64, 128), (32, 48), (30, 44), (64, 20)])
def test_meta_kernel_agrees_with_the_rules(d, f):
    """The meta kernel checks what CUDA's does: where the rules allow bf16 shapes it runs."""
    x = torch.empty(10, d, dtype=torch.bfloat16, device="meta")
    w = torch.empty(3, d, f, dtype=torch.bfloat16, device="meta")
    offs = torch.empty(3, dtype=torch.int32, device="meta")
    allowed = grouped_mm_supported(torch.device("meta"), torch.bfloat16, d, f) == ""
    try:
        F.grouped_mm(x, w, offs=offs)
        ran = True
    except RuntimeError:
        ran = False
    assert ran is allowed


def test_grouped_falls_back_to_the_loop_on_unaligned_shapes():
    torch.manual_seed(0)
    model = MoETransformer(MoEConfig(d_model=30, n_layers=1, n_heads=2, n_experts=4, top_k=2,
                                     d_ff=44, max_seq_len=32)).eval()
    tokens = torch.randint(3, 200, (2, 12))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loop = model.set_expert_impl("loop")(tokens).logits
        with pytest.warns(RuntimeWarning, match="d_model=30"):
            grouped = model.set_expert_impl("grouped")(tokens).logits
    torch.testing.assert_close(grouped, loop, rtol=0, atol=0)

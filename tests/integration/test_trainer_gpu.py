"""The GPU path: one RL step of the toy on CUDA in bf16, and the grouped-GEMM experts there.

Marked ``gpu``: tests/conftest.py skips these (saying why) where torch sees no CUDA device. The CPU
tier proves the same code path on ``meta`` and ``cpu`` (tests/unit/trainer/test_device.py,
tests/unit/policy/test_toy_model.py).
"""

import math

import pytest
import torch

from policy.toy.checkpoint import load_checkpoint, save_checkpoint
from policy.toy.model import MoEConfig, MoETransformer
from tasks.toy import generate_tasks
from trainer.config import TrainerConfig
from trainer.recipe import RLRecipe
from trainer.rollout import sample_rows

pytestmark = [pytest.mark.integration, pytest.mark.gpu]

TINY = MoEConfig(d_model=64, n_layers=2, n_heads=2, n_experts=4, top_k=2, d_ff=128, max_seq_len=160)


def test_one_rl_step_on_cuda_in_bf16(tmp_path):
    torch.manual_seed(0)
    model = MoETransformer(TINY).eval()
    champion = save_checkpoint(model, tmp_path / "champion", metadata={"model_version": 1})
    rows = sample_rows(model.cuda(), generate_tasks(8, seed=0, split="train"), samples_per_task=2,
                       temperature=1.0, model_version=1, seed=0, max_new_tokens=8)
    cfg = TrainerConfig(steps=1, batch_size=8, device="cuda", precision="bf16", lr=1e-3)
    recipe = RLRecipe(champion, rows, cfg)
    recipe.setup()
    assert all(p.is_cuda for p in recipe.policy.parameters())
    assert recipe.policy.blocks[0].ffn.grouped(torch.device("cuda"), torch.bfloat16)
    metrics = recipe.train()
    assert math.isfinite(metrics["loss"]) and math.isfinite(metrics["grad_norm"])
    assert abs(metrics["kl_theta_ref_k3"]) < 1e-3  # policy and reference agree before the update
    recipe.save_checkpoint(tmp_path / "cand")
    cand = load_checkpoint(tmp_path / "cand")  # loads on the CPU
    assert any(not torch.equal(a, b.cpu()) for a, b in
               zip(cand.state_dict().values(), model.state_dict().values()))


def test_grouped_kernel_matches_the_loop_on_cuda():
    torch.manual_seed(0)
    model = MoETransformer(TINY).cuda().train()
    tokens = torch.randint(0, 256, (4, 96), device="cuda")
    outs, grads = {}, {}
    for impl in ("loop", "grouped"):
        model.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model.set_expert_impl(impl)(tokens)
        out.logits.float().logsumexp(-1).mean().backward()
        outs[impl], grads[impl] = out.logits, model.blocks[0].ffn.w_in.grad.clone()
    assert torch.allclose(outs["loop"], outs["grouped"], atol=3e-2, rtol=3e-2)
    assert torch.allclose(grads["loop"], grads["grouped"], atol=3e-2, rtol=5e-2)


def test_logits_are_an_fp32_projection_under_cuda_autocast():
    torch.manual_seed(0)
    model = MoETransformer(TINY).cuda().eval()
    seen = {}
    model.lm_head.register_forward_pre_hook(lambda m, a: seen.setdefault("h", a[0]))
    tokens = torch.randint(0, 256, (2, 32), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(tokens).logits
    exact = seen["h"].double() @ model.lm_head.weight.double().T
    assert logits.dtype == torch.float32
    assert (logits.double() - exact).abs().max() < 1e-3  # TF32 off by default for matmuls


@pytest.mark.parametrize(("d", "f"), [(64, 128), (64, 120), (64, 100)])
def test_grouped_mm_rules_match_this_gpu(d, f):
    import torch.nn.functional as F

    from policy.toy.model import grouped_mm_supported

    x = torch.randn(10, d, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(3, d, f, device="cuda", dtype=torch.bfloat16)
    offs = torch.tensor([3, 7, 10], device="cuda", dtype=torch.int32)
    allowed = grouped_mm_supported(x.device, torch.bfloat16, d, f) == ""
    try:
        F.grouped_mm(x, w, offs=offs)
        torch.cuda.synchronize()
        ran = True
    except RuntimeError:
        ran = False
    assert ran is allowed

"""bench/train_gpu.py without a GPU: it says so and writes nothing; --smoke runs its code path."""

import pytest
import torch

from bench import train_gpu


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA behaviour")
def test_without_cuda_it_says_so_and_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(train_gpu, "RESULTS", tmp_path / "train_gpu.json")
    assert train_gpu.main(["--models", "toy"]) == 0
    assert "no CUDA" in capsys.readouterr().err
    assert not (tmp_path / "train_gpu.json").exists()


def test_smoke_runs_every_model_on_cpu_and_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(train_gpu, "RESULTS", tmp_path / "train_gpu.json")
    assert train_gpu.main(["--smoke", "--models", "olmoe,qwen3moe,toy"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "tok/s" in ln]
    assert len(lines) == 3 and all("MFU" in ln for ln in lines)
    assert not (tmp_path / "train_gpu.json").exists()


def test_hf_active_params_count_top_k_of_the_experts():
    model = train_gpu.hf_moe("olmoe", smoke=True)
    c = model.config
    total = sum(p.numel() for p in model.parameters())
    experts = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
    embed = model.get_input_embeddings().weight.numel()
    expected = total - embed - experts + experts * c.num_experts_per_tok // c.num_experts
    assert train_gpu.hf_active_params(model) == expected
    assert 0 < experts and c.num_experts_per_tok < c.num_experts


def test_kernel_kind_names_the_kernels_of_a_training_step():
    assert train_gpu.kernel_kind("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n") == "matmul"
    assert train_gpu.kernel_kind("aten::_grouped_mm") == "matmul"
    assert train_gpu.kernel_kind("pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits>") \
        == "attention"
    assert train_gpu.kernel_kind("void at::native::(anonymous)::fused_adamw_kernel") == "optimizer"
    assert train_gpu.kernel_kind("triton_poi_fused_add_mul_silu_0") == "other"


def test_profile_splits_one_step_and_keeps_its_top_kernels(tmp_path):
    out = tmp_path / "p.json"
    assert train_gpu.main(["--smoke", "--models", "toy", "--profile", "3", "--out",
                           str(out)]) == 0
    prof = __import__("json").loads(out.read_text())["runs"][0]["profile"]
    assert prof["clock"] == "cpu" and prof["total_ms"] > 0
    assert len(prof["top"]) == 3
    assert [t["ms"] for t in prof["top"]] == sorted((t["ms"] for t in prof["top"]), reverse=True)
    assert abs(sum(v["share"] for v in prof["by_kind"].values()) - 1.0) < 1e-6
    assert "matmul" in prof["by_kind"]


def test_profile_leaves_out_annotated_ranges_that_repeat_their_kernels(tmp_path):
    out = tmp_path / "p.json"
    assert train_gpu.main(["--smoke", "--models", "toy", "--profile", "500", "--out",
                           str(out)]) == 0
    names = [t["name"] for t in
             __import__("json").loads(out.read_text())["runs"][0]["profile"]["top"]]
    assert "aten::mm" in names
    assert not [n for n in names if n.startswith("Optimizer.")]


def test_sdpa_pins_the_attention_backend(tmp_path):
    out = tmp_path / "s.json"
    assert train_gpu.main(["--smoke", "--models", "olmoe", "--sdpa", "math", "--profile", "500",
                           "--out", str(out)]) == 0
    run = __import__("json").loads(out.read_text())["runs"][0]
    names = [t["name"] for t in run["profile"]["top"]]
    assert run["sdpa"] == "math"
    assert "aten::_scaled_dot_product_attention_math" in names
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" not in names


def test_causal_only_attention_computes_what_the_masked_one_does():
    torch.manual_seed(0)
    masked = train_gpu.hf_moe("olmoe", smoke=True).eval()
    causal = train_gpu.hf_moe("olmoe", smoke=True, causal_only=True).eval()
    causal.load_state_dict(masked.state_dict())
    assert causal.config._attn_implementation == train_gpu.CAUSAL_SDPA
    x = torch.randint(0, masked.config.vocab_size, (2, 16))
    with torch.no_grad():
        a, b = masked(input_ids=x).logits, causal(input_ids=x).logits
    assert torch.allclose(a, b, atol=1e-5)
    x2 = x.clone()
    x2[:, -1] = (x2[:, -1] + 1) % masked.config.vocab_size  # the future must not leak back
    with torch.no_grad():
        c = causal(input_ids=x2).logits
    assert torch.allclose(b[:, :-1], c[:, :-1], atol=1e-5)


def test_causal_only_passes_sdpa_no_mask_and_is_causal(monkeypatch):
    import torch.nn.functional as F

    seen = []
    sdpa = F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        seen.append((kwargs.get("attn_mask"), kwargs.get("is_causal")))
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    model = train_gpu.hf_moe("olmoe", smoke=True, causal_only=True).eval()
    with torch.no_grad():
        model(input_ids=torch.randint(0, 100, (2, 8)))
    assert seen and all(m is None and c for m, c in seen)

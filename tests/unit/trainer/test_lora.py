"""LoRA on attention, experts and routers: merged output equals the adapted output, only the
adapters get gradients, and the saved checkpoint is a plain model the loader reads."""

import pytest
import torch

from policy.loader import load_policy
from policy.toy.checkpoint import save_checkpoint
from tasks.toy import generate_tasks
from trainer.config import Trainable, TrainerConfig
from trainer.lora import apply_lora, has_lora, merge_lora
from trainer.recipe import RLRecipe
from trainer.rollout import sample_rows

TARGETS = Trainable().lora_targets


@pytest.fixture
def mixtral():
    from transformers import MixtralConfig, MixtralForCausalLM

    torch.manual_seed(0)
    return MixtralForCausalLM(MixtralConfig(
        vocab_size=64, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, num_local_experts=4,
        num_experts_per_tok=2, sliding_window=None)).eval()


def _perturb(model):
    """Non-zero B, as after training (B starts at 0, so W' = W at first)."""
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("lora_B"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)


def test_adapters_cover_attention_experts_and_routers(mixtral):
    names = [n for n, _ in mixtral.named_parameters()]
    counts = apply_lora(mixtral, rank=2, alpha=4.0, targets=TARGETS)
    adapted = {n.split(".parametrizations.")[0] + "." + n.split(".parametrizations.")[1]
               .split(".")[0] for n, _ in mixtral.named_parameters() if "lora_A" in n}
    for layer in (0, 1):
        p = f"model.layers.{layer}."
        assert {p + "self_attn.q_proj.weight", p + "self_attn.o_proj.weight",
                p + "mlp.experts.gate_up_proj", p + "mlp.experts.down_proj",
                p + "mlp.gate.weight"} <= adapted
    assert counts["lora_tensors"] == len(adapted) == 2 * 7  # q k v o, 2 expert tensors, router
    gate_up = mixtral.model.layers[0].mlp.experts.parametrizations.gate_up_proj[0]
    assert gate_up.lora_A.shape == (4, 2, 16) and gate_up.lora_B.shape == (4, 48, 2)  # per expert
    merge_lora(mixtral)
    assert [n for n, _ in mixtral.named_parameters()] == names


def test_only_adapters_get_gradients(mixtral):
    apply_lora(mixtral, rank=2, alpha=4.0, targets=TARGETS)
    _perturb(mixtral)
    ids = torch.randint(0, 64, (2, 7), generator=torch.Generator().manual_seed(0))
    mixtral.train()
    mixtral(input_ids=ids, labels=ids).loss.backward()
    for n, p in mixtral.named_parameters():
        if "lora_" in n:
            assert p.requires_grad and p.grad is not None and p.grad.abs().sum() > 0, n
        else:
            assert not p.requires_grad and p.grad is None, n


def test_merged_model_computes_what_the_adapted_one_did(mixtral):
    ids = torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(0))
    plain = mixtral(input_ids=ids).logits.detach()
    apply_lora(mixtral, rank=4, alpha=8.0, targets=TARGETS)
    assert torch.allclose(mixtral(input_ids=ids).logits, plain, atol=1e-6)  # B = 0: W' = W
    _perturb(mixtral)
    with torch.no_grad():
        adapted = mixtral(input_ids=ids).logits
        assert not torch.allclose(adapted, plain, atol=1e-3)
        assert merge_lora(mixtral) == 14 and not has_lora(mixtral)
        merged = mixtral(input_ids=ids).logits
    assert torch.allclose(merged, adapted, atol=1e-5)


def test_no_matching_weight_is_an_error(mixtral):
    with pytest.raises(ValueError, match="match no weight"):
        apply_lora(mixtral, rank=2, alpha=4.0, targets=("nothing.*",))


def test_the_recipe_trains_adapters_and_saves_a_plain_checkpoint(tiny_model, tmp_path):
    champion = save_checkpoint(tiny_model, tmp_path / "c", metadata={"model_version": 1})
    rows = sample_rows(tiny_model, generate_tasks(6, seed=0, split="train"), samples_per_task=2,
                       model_version=1, seed=0, max_new_tokens=6, temperature=1.0)
    cfg = TrainerConfig(steps=2, batch_size=12, lr=5e-2,
                        trainable={"scope": "lora", "lora_rank": 2})
    recipe = RLRecipe(champion, rows, cfg)
    recipe.setup()
    frozen = {n: p.detach().clone() for n, p in recipe.policy.named_parameters()
              if "lora_" not in n}
    m = recipe.train()
    assert 0 < m["params_trainable"] < 0.2 * m["params_total"]
    assert all(torch.equal(frozen[n], p) for n, p in recipe.policy.named_parameters()
               if "lora_" not in n)  # the base weights never move
    batch = recipe._collate(recipe.samples[:4])
    with torch.no_grad():
        adapted = recipe.plug.token_logprobs(batch.tokens, batch.targets, batch.pad_mask,
                                             batch.temperature).logprobs
    out = recipe.save_checkpoint(tmp_path / "cand")
    loaded = load_policy(out)  # the existing loader: a plain toy checkpoint
    assert not has_lora(loaded.module)
    assert set(loaded.module.state_dict()) == set(tiny_model.state_dict())
    with torch.no_grad():
        reloaded = loaded.token_logprobs(batch.tokens, batch.targets, batch.pad_mask,
                                         batch.temperature).logprobs
    assert torch.allclose(reloaded, adapted, atol=1e-5)
    assert not torch.allclose(reloaded, torch.zeros_like(reloaded))
    base = load_policy(champion)
    with torch.no_grad():
        before = base.token_logprobs(batch.tokens, batch.targets, batch.pad_mask,
                                     batch.temperature).logprobs
    assert not torch.allclose(reloaded, before, atol=1e-4)  # the update is in the checkpoint

"""The trainable-parameter choice: the top N layers with their experts and router, the final norm;
embeddings and the (tied) head frozen."""

import pytest
import torch

from policy.toy.checkpoint import save_checkpoint
from tasks.toy import generate_tasks
from trainer.config import TrainerConfig
from trainer.recipe import RLRecipe
from trainer.rollout import sample_rows
from trainer.trainable import select_trainable


def test_top_layers_of_the_toy(tiny_model):
    counts = select_trainable(tiny_model, scope="top_layers", top_layers=1, train_embeddings=False)
    trained = {n for n, p in tiny_model.named_parameters() if p.requires_grad}
    block1 = {n for n, _ in tiny_model.named_parameters() if n.startswith("blocks.1.")}
    assert trained == block1 | {"norm.weight"}
    assert {"blocks.1.ffn.router.weight", "blocks.1.ffn.w_in"} <= trained  # router and experts
    per_block = sum(p.numel() for p in tiny_model.blocks[1].parameters())
    assert counts == {"params_total": tiny_model.num_params(),
                      "params_trainable": per_block + 32, "layers_trainable": 1}


def test_a_tied_head_stays_frozen_with_its_embeddings():
    from transformers import LlamaConfig, LlamaForCausalLM

    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32,
                                         num_hidden_layers=3, num_attention_heads=2,
                                         num_key_value_heads=1, tie_word_embeddings=True))
    assert model.lm_head.weight is model.model.embed_tokens.weight
    counts = select_trainable(model, scope="top_layers", top_layers=2, train_embeddings=False)
    assert not model.lm_head.weight.requires_grad
    assert not any(p.requires_grad for p in model.model.layers[0].parameters())
    assert all(p.requires_grad for p in model.model.layers[1].parameters())
    assert model.model.norm.weight.requires_grad
    assert counts["params_trainable"] == (
        sum(p.numel() for p in model.model.layers[1:].parameters()) + 16)
    select_trainable(model, scope="top_layers", top_layers=2, train_embeddings=True)
    assert model.lm_head.weight.requires_grad


def test_too_many_layers_is_an_error(tiny_model):
    with pytest.raises(ValueError, match="top_layers=3: the model has 2 layers"):
        select_trainable(tiny_model, scope="top_layers", top_layers=3, train_embeddings=False)


def test_the_recipe_updates_only_the_chosen_layers(tiny_model, tmp_path):
    champion = save_checkpoint(tiny_model, tmp_path / "c", metadata={"model_version": 1})
    rows = sample_rows(tiny_model, generate_tasks(6, seed=0, split="train"), samples_per_task=2,
                       model_version=1, seed=0, max_new_tokens=6, temperature=1.0)
    cfg = TrainerConfig(steps=2, batch_size=12, lr=1e-2,
                        trainable={"scope": "top_layers", "top_layers": 1})
    recipe = RLRecipe(champion, rows, cfg)
    recipe.setup()
    before = {n: p.detach().clone() for n, p in recipe.policy.named_parameters()}
    m = recipe.train()
    moved = {n for n, p in recipe.policy.named_parameters() if not torch.equal(before[n], p)}
    assert moved and all(n.startswith("blocks.1.") or n == "norm.weight" for n in moved)
    assert m["params_trainable"] < m["params_total"]

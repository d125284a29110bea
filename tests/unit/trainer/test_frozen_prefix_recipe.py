"""The recipe with a frozen prefix: its steps skip the frozen bottom layers of the policy and
make the same update as the whole forward; LoRA and the toy keep the whole forward."""

import json

import pyarrow as pa
import pytest
import torch


@pytest.fixture
def hf_setting(tmp_path):
    from policy.config import HFPolicyConfig, TinyHFSpec
    from policy.loader import load_policy
    from tasks.toy import generate_tasks
    from trainer.rollout import policy_rows

    champion = load_policy(HFPolicyConfig(build=TinyHFSpec(family="mixtral", layers=3, hidden=32,
                                                           heads=2, kv_heads=1)),
                           workdir=tmp_path / "build")
    champion.save(tmp_path / "champion", metadata={"model_version": 1})
    rows = policy_rows(champion, generate_tasks(6, seed=0, split="train"), samples=2,
                       temperature=1.0, seed=0)
    rows = rows.set_column(rows.schema.get_field_index("reward"), "reward",
                           pa.array([1.0, -1.0] * (rows.num_rows // 2)))
    retain = tmp_path / "retain.jsonl"
    retain.write_text("".join(json.dumps({"prompt": f"add {i} and {i + 1}"}) + "\n"
                              for i in range(8)))
    return tmp_path / "champion", rows, retain


def _steps(setting, frozen_prefix: bool):
    from trainer.config import TrainerConfig
    from trainer.recipe import RLRecipe

    champion, rows, retain = setting
    cfg = TrainerConfig(steps=2, batch_size=6, lr=1e-2, frozen_prefix=frozen_prefix,
                        trainable={"scope": "top_layers", "top_layers": 1},
                        retain={"path": str(retain), "prompts": 2, "max_new_tokens": 4,
                                "eval_prompts": 2})
    recipe = RLRecipe(champion, rows, cfg)
    recipe.setup()
    calls = []
    bottom = recipe.policy.base_model.layers[0]
    bottom.register_forward_hook(lambda *a: calls.append(1))
    try:
        metrics = recipe.train()
        state = {k: v.clone() for k, v in recipe.policy.state_dict().items()}
    finally:
        recipe.cleanup()
    return metrics, state, len(calls)


def test_the_recipe_skips_the_frozen_layers_and_makes_the_same_update(hf_setting):
    on, state_on, calls_on = _steps(hf_setting, True)
    off, state_off, calls_off = _steps(hf_setting, False)
    assert on["frozen_prefix_layers"] == 2 and off["frozen_prefix_layers"] == 0
    # the policy's bottom layer ran in no step (retain sampling decodes with it: that is all)
    assert calls_off > calls_on
    for key in ("loss", "grad_norm", "retain_kl", "kl_theta_ref_k3", "kl_theta_ref_k3_final",
                "retain_kl_final"):
        assert on[key] == pytest.approx(off[key], rel=1e-4, abs=1e-6), key
    # the same update up to float reordering (Adam's first steps move each weight by ~lr)
    for k, v in state_off.items():
        assert torch.allclose(state_on[k], v, atol=1e-4), k


def test_lora_and_the_toy_keep_the_whole_forward(hf_setting, tiny_model, tmp_path):
    from policy.toy.checkpoint import save_checkpoint
    from trainer.config import TrainerConfig
    from trainer.recipe import RLRecipe

    champion, rows, _ = hf_setting
    lora = RLRecipe(champion, rows, TrainerConfig(steps=1, batch_size=6,
                                                  trainable={"scope": "lora", "lora_rank": 2}))
    lora.setup()
    assert lora.prefix_layers == 0
    lora.cleanup()
    toy_dir = save_checkpoint(tiny_model, tmp_path / "toy", metadata={"model_version": 1})
    from tasks.toy import generate_tasks
    from trainer.rollout import sample_rows

    toy_rows = sample_rows(tiny_model, generate_tasks(4, seed=0, split="train"),
                           samples_per_task=1, model_version=1, seed=0, max_new_tokens=4,
                           temperature=1.0)
    toy = RLRecipe(toy_dir, toy_rows, TrainerConfig(steps=1, batch_size=4,
                                                    trainable={"scope": "top_layers",
                                                               "top_layers": 1}))
    toy.setup()
    assert toy.prefix_layers == 0
    toy.cleanup()

"""One RL update of a tiny HF Qwen3-MoE through ``run_training``: rows sampled by the policy
itself (served prompt ids, processed logprobs, routed experts of prompt and response), trained
through the Policy plug; the checkpoint is an HF directory with changed weights."""

import pyarrow as pa
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _rows(policy, n_tasks: int = 6, samples: int = 2, temperature: float = 1.0,
          top_p: float = 1.0) -> pa.Table:
    from tasks.toy import generate_tasks
    from trainer.rollout import policy_rows

    return policy_rows(policy, generate_tasks(n_tasks, seed=0, split="train"), samples=samples,
                       temperature=temperature, top_p=top_p, seed=0)


def test_one_rl_step_on_a_tiny_qwen3_moe(tmp_path):
    import math

    import torch

    from policy.config import HFPolicyConfig, TinyHFSpec
    from policy.hf import HFPolicy
    from policy.loader import load_policy
    from trainer.config import TrainerConfig
    from trainer.recipe import run_training

    champion = load_policy(HFPolicyConfig(build=TinyHFSpec(family="qwen3_moe", layers=3,
                                                           mlp_only_layers=(1,))),
                           workdir=tmp_path / "build")
    champion.save(tmp_path / "champion", metadata={"model_version": 1})
    rows = _rows(champion)
    rows = rows.set_column(rows.schema.get_field_index("reward"), "reward",
                           pa.array([1.0, -1.0] * (rows.num_rows // 2)))  # both signs present
    cfg = TrainerConfig(steps=2, batch_size=6, lr=1e-3, mismatch_every=1)
    metrics = run_training(tmp_path / "champion", rows, cfg, tmp_path / "candidate")
    assert math.isfinite(metrics["loss"]) and metrics["grad_norm"] > 0
    assert metrics["replay_replaced"] == 0 and metrics["rows_without_routing"] == 0
    candidate = load_policy(tmp_path / "candidate")
    assert isinstance(candidate, HFPolicy) and candidate.moe_spec.moe_layers == (0, 2)
    before = champion.module.state_dict()
    changed = [k for k, v in candidate.module.state_dict().items()
               if not torch.equal(v, before[k])]
    assert any("mlp.gate.weight" in k for k in changed)
    assert any("experts" in k for k in changed)
    assert "moe/load_entropy" in metrics


def test_served_logprobs_equal_the_trainers_recomputation(tmp_path):
    import torch

    from policy.config import HFPolicyConfig, TinyHFSpec
    from policy.loader import load_policy
    from trainer.config import TrainerConfig
    from trainer.recipe import RLRecipe

    policy = load_policy(HFPolicyConfig(build=TinyHFSpec(family="olmoe")), workdir=tmp_path)
    policy.save(tmp_path / "champion", metadata={"model_version": 1})
    rows = _rows(policy, temperature=0.8)
    recipe = RLRecipe(tmp_path / "champion", rows, TrainerConfig(steps=1, batch_size=12))
    recipe.setup()
    try:
        for s, ref in zip(recipe.samples, recipe.logp_ref):
            torch.testing.assert_close(ref, torch.tensor(s.logp_b), rtol=0, atol=1e-4)
    finally:
        recipe.cleanup()


def test_deepspeed_backend_refuses_an_hf_policy(tmp_path):
    from policy.config import HFPolicyConfig, TinyHFSpec
    from policy.loader import load_policy
    from trainer.config import DeepSpeedBackend, TrainerConfig
    from trainer.recipe import RLRecipe

    policy = load_policy(HFPolicyConfig(build=TinyHFSpec(family="olmoe")), workdir=tmp_path)
    policy.save(tmp_path / "champion")
    cfg = TrainerConfig(steps=1, batch_size=2, backend=DeepSpeedBackend())
    recipe = RLRecipe(tmp_path / "champion", _rows(policy, n_tasks=1), cfg)
    with pytest.raises(ValueError, match="deepspeed.*'hf' policy"):
        recipe.setup()
    recipe.cleanup()


def test_top_p_rows_and_the_value_head_on_an_hf_policy(tmp_path):
    """Rows a tiny Qwen3-MoE sampled at T = 0.8, top_p = 0.7: pi_theta renormalised over the
    champion's nucleus (the plug's full logits) equals the logged logprob before any update, and
    the value head reads the plug's final hidden states."""
    import math

    from policy.config import HFPolicyConfig, TinyHFSpec
    from policy.loader import load_policy
    from trainer.config import TrainerConfig
    from trainer.recipe import RLRecipe

    policy = load_policy(HFPolicyConfig(build=TinyHFSpec(family="qwen3_moe")), workdir=tmp_path)
    policy.save(tmp_path / "champion", metadata={"model_version": 1})
    rows = _rows(policy, temperature=0.8, top_p=0.7)
    rows = rows.set_column(rows.schema.get_field_index("reward"), "reward",
                           pa.array([1.0, -1.0, -1.0] * (rows.num_rows // 3)))
    cfg = TrainerConfig(steps=1, batch_size=rows.num_rows, lr=1e-9, baseline="value_head")
    recipe = RLRecipe(tmp_path / "champion", rows, cfg)
    recipe.setup()
    try:
        assert recipe.counts["rows_top_p"] == rows.num_rows
        assert recipe.counts["tokens_outside_nucleus"] == 0  # the champion sampled them itself
        m = recipe.train_step(list(range(rows.num_rows)))
        assert abs(m["kl_behaviour_k1"]) < 1e-4 and m["ratio_mean"] == pytest.approx(1, abs=1e-4)
        assert math.isfinite(m["value_loss"]) and m["value_loss"] > 0
    finally:
        recipe.cleanup()

"""The trainer's side of a first GPU run, proven on the CPU: one GPU per rank under a launcher,
fp32 master weights whatever the HF dtype default, a DeepSpeed bf16 engine's reference in bf16
too, and router replay refused where DeepSpeed's MoE layers cannot replay."""

import pytest
import torch

from policy.toy.checkpoint import save_checkpoint
from tasks.toy import generate_tasks
from trainer.config import DeepSpeedBackend, TrainerConfig
from trainer.recipe import RLRecipe, resolve_device
from trainer.rollout import sample_rows


@pytest.fixture
def champion(tiny_model, tmp_path):
    return save_checkpoint(tiny_model, tmp_path / "champion", metadata={"model_version": 1})


@pytest.fixture
def rows(tiny_model):
    return sample_rows(tiny_model, generate_tasks(2, seed=0, split="train"), samples_per_task=2,
                       temperature=1.0, model_version=1, seed=0, max_new_tokens=4)


@pytest.fixture
def fake_gpus(monkeypatch):
    """torch believes in CUDA devices; ``set_device`` calls are recorded, not made."""
    calls: list[int] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_device", calls.append)
    return calls


@pytest.mark.parametrize("name", ["cuda", "auto"])
def test_cuda_under_a_launcher_is_the_local_rank_gpu(fake_gpus, monkeypatch, name):
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert resolve_device(name) == torch.device("cuda", 3)
    assert fake_gpus == [3]


def test_cuda_without_a_launcher_is_the_current_gpu(fake_gpus, monkeypatch):
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert resolve_device("cuda") == torch.device("cuda") and fake_gpus == []
    assert resolve_device("cpu") == torch.device("cpu")


def test_deepspeed_init_binds_the_local_rank_gpu_first(fake_gpus, monkeypatch):
    from trainer import ds_backend

    class Bound(Exception):
        pass

    def record(i):
        fake_gpus.append(i)
        raise Bound  # stop before DeepSpeed would open NCCL on a GPU that is not there

    monkeypatch.setattr(torch.cuda, "set_device", record)
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: False)
    with pytest.raises(Bound):
        ds_backend.init_distributed()
    assert fake_gpus == [1]


def test_recipe_trains_fp32_master_weights_where_hf_auto_means_bf16(tmp_path, monkeypatch):
    from policy.config import HFPolicyConfig, TinyHFSpec
    from policy.loader import load_policy
    from trainer.rollout import policy_rows

    policy = load_policy(HFPolicyConfig(build=TinyHFSpec(family="qwen3_moe")), workdir=tmp_path)
    policy.save(tmp_path / "champion", metadata={"model_version": 1})
    rows = policy_rows(policy, generate_tasks(2, seed=0, split="train"), samples=2, seed=0,
                       max_new_tokens=4)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # "auto" now reads bf16
    assert next(load_policy(tmp_path / "champion").module.parameters()).dtype == torch.bfloat16
    recipe = RLRecipe(tmp_path / "champion", rows, TrainerConfig(steps=1, batch_size=4,
                                                                  device="cpu"))
    recipe.setup()
    assert {p.dtype for p in recipe.policy.parameters()} == {torch.float32}
    assert {p.dtype for p in recipe.reference.parameters()} == {torch.float32}


def test_deepspeed_bf16_casts_the_frozen_reference_like_the_policy(champion, rows):
    cfg = TrainerConfig(steps=1, batch_size=4, device="cpu",
                        backend=DeepSpeedBackend(zero_stage=1, bf16=True))
    recipe = RLRecipe(champion, rows, cfg)
    recipe.device = torch.device("cpu")
    frozen = recipe._frozen(champion)
    assert {p.dtype for p in frozen.module.parameters()} == {torch.bfloat16}
    assert not any(p.requires_grad for p in frozen.module.parameters())
    plain = RLRecipe(champion, rows, TrainerConfig(steps=1, batch_size=4, device="cpu"))
    plain.device = torch.device("cpu")
    assert {p.dtype for p in plain._frozen(champion).module.parameters()} == {torch.float32}


def test_replay_with_expert_parallel_deepspeed_is_refused(champion, rows):
    cfg = TrainerConfig(steps=1, batch_size=4, device="cpu", router_replay=True,
                        backend=DeepSpeedBackend(zero_stage=2, ep_size=2))
    with pytest.raises(ValueError, match="router_replay=True needs backend.ep_size=1"):
        RLRecipe(champion, rows, cfg).setup()

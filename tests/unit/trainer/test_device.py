"""Device and precision handling of the RL recipe: everything on the configured device."""

import pyarrow as pa
import pytest
import torch

from policy.toy.adapter import ToyPolicy
from policy.toy.checkpoint import save_checkpoint
from policy.toy.model import MoETransformer
from tasks.toy import generate_tasks
from trainer.config import TrainerConfig
from trainer.data import collate, rows_to_samples
from trainer.recipe import RLRecipe, policy_logprobs
from trainer.rollout import sample_rows


@pytest.fixture
def champion(tiny_model, tmp_path):
    return save_checkpoint(tiny_model, tmp_path / "champion", metadata={"model_version": 1})


@pytest.fixture
def rows(tiny_model) -> pa.Table:
    tasks = generate_tasks(4, seed=0, split="train")
    return sample_rows(tiny_model, tasks, samples_per_task=2, temperature=1.0, model_version=1,
                       seed=0, max_new_tokens=6)


def _batch(rows, config):
    samples, _ = rows_to_samples(rows, vocab_size=config.vocab_size,
                                 max_seq_len=config.max_seq_len)
    return collate(samples, n_layers=config.n_layers, top_k=config.top_k)


def test_batch_to_moves_every_tensor(tiny_model, rows):
    batch = _batch(rows, tiny_model.config)
    moved = batch.to("meta")
    for name, value in vars(moved).items():
        if isinstance(value, torch.Tensor):
            assert value.is_meta, name
            assert value.shape == getattr(batch, name).shape, name
        else:
            assert value == getattr(batch, name), name


def test_policy_logprobs_on_meta_create_nothing_off_device(tiny_model, rows, off_device):
    with torch.device("meta"):
        model = MoETransformer(tiny_model.config).to(torch.bfloat16).train()
    batch = _batch(rows, tiny_model.config).to("meta")
    with off_device("meta") as seen:
        logp, out = policy_logprobs(ToyPolicy(model), batch, replay=True, replay_min_ratio=0.1)
        (logp.sum() + out.aux_loss).backward()
    assert seen == []
    assert logp.is_meta and logp.dtype == torch.float32


def test_train_step_on_explicit_cpu_device(champion, rows, off_device):
    recipe = RLRecipe(champion, rows, TrainerConfig(steps=1, batch_size=4, device="cpu"))
    recipe.setup()
    assert recipe.device == torch.device("cpu")
    assert all(p.device == recipe.device for p in recipe.policy.parameters())
    with off_device("cpu") as seen:
        metrics = recipe.train_step([0, 1, 2, 3])
    assert seen == [] and metrics["loss"] == metrics["loss"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error without a GPU")
def test_cuda_without_a_gpu_is_a_clear_error(champion, rows):
    recipe = RLRecipe(champion, rows, TrainerConfig(steps=1, device="cuda"))
    with pytest.raises(ValueError, match="device='cuda'"):
        recipe.setup()


def test_bf16_precision_runs_forward_passes_under_autocast(champion, rows):
    """Rows were sampled in fp32: replaying them in fp32 matches to rounding, in bf16 it does
    not, while policy and reference (both bf16) still agree exactly on the first step."""
    mismatch = {}
    for precision in ("fp32", "bf16"):
        cfg = TrainerConfig(steps=1, batch_size=rows.num_rows, lr=1e-9, max_staleness=100,
                            device="cpu", precision=precision)
        recipe = RLRecipe(champion, rows, cfg)
        recipe.setup()
        recipe.train()
        m = recipe.history[0]
        assert abs(m["kl_theta_ref_k3"]) < 1e-6, precision
        mismatch[precision] = abs(m["mismatch_kl_replay"])
    assert mismatch["fp32"] < 1e-5 < mismatch["bf16"]

"""Ray Train: two TorchTrainer workers (gloo) run the same recipe; rank 0's checkpoint loads
into a plain MoETransformer and differs from the champion."""

import tempfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

from ratchet.tasks import generate_tasks
from trainer.checkpoint import load_checkpoint, save_checkpoint
from trainer.config import TrainerConfig
from trainer.model import MoEConfig, MoETransformer
from trainer.rollout import sample_rows

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def ray_local():
    import ray

    from trainer.ray_backend import start_local_ray

    gcs = start_local_ray(2, Path(tempfile.mkdtemp(prefix="ray", dir="/tmp")))
    yield gcs
    ray.shutdown()


def test_ray_listens_on_loopback_only(ray_local):
    assert ray_local.startswith("127.0.0.1:"), ray_local


def test_two_workers_train_and_checkpoint(ray_local, tmp_path):
    from trainer.ray_backend import run_training_ray

    torch.manual_seed(0)
    model = MoETransformer(MoEConfig(d_model=32, n_layers=2, n_heads=2, d_ff=48)).eval()
    champion = save_checkpoint(model, tmp_path / "champion", metadata={"model_version": 1})
    rows = sample_rows(model, generate_tasks(8, seed=0, split="train"), samples_per_task=2,
                       temperature=1.0, model_version=1, seed=0, max_new_tokens=6)
    pq.write_table(rows, tmp_path / "rows.parquet")
    metrics = run_training_ray(champion, tmp_path / "rows.parquet",
                               TrainerConfig(steps=2, batch_size=4, lr=1e-3),
                               tmp_path / "cand", num_workers=2)
    assert metrics["rows_used"] == rows.num_rows
    cand = load_checkpoint(tmp_path / "cand")
    assert any(not torch.equal(a, b) for a, b in
               zip(cand.state_dict().values(), model.state_dict().values()))

"""Ray Train: two TorchTrainer workers (gloo) run the same recipe; rank 0's checkpoint loads
into a plain MoETransformer and differs from the champion."""

import tempfile
from pathlib import Path

import pytest
import torch

from policy.toy.checkpoint import load_checkpoint
from trainer.config import TrainerConfig
from trainer.fixtures import tiny_champion

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

    model, champion, rows = tiny_champion(tmp_path)
    metrics = run_training_ray(champion, tmp_path / "rows.parquet",
                               TrainerConfig(steps=2, batch_size=4, lr=1e-3),
                               tmp_path / "cand", num_workers=2)
    assert metrics["rows_used"] == rows.num_rows
    cand = load_checkpoint(tmp_path / "cand")
    assert any(not torch.equal(a, b) for a, b in
               zip(cand.state_dict().values(), model.state_dict().values()))

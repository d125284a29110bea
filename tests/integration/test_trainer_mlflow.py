"""The recipe logs per-step MoE health and RL metrics into the active MLflow run."""

import pytest

from trainer.config import TrainerConfig
from trainer.fixtures import tiny_champion
from trainer.recipe import RLRecipe

pytestmark = pytest.mark.integration


def test_per_step_metrics_logged(tmp_path):
    import mlflow

    _, champion, rows = tiny_champion(tmp_path, n_tasks=6)
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    mlflow.set_experiment("trainer-test")
    steps = 4
    with mlflow.start_run() as run:
        cfg = TrainerConfig(steps=steps, batch_size=4, mismatch_every=2)
        recipe = RLRecipe(champion, rows, cfg)
        recipe.setup()
        recipe.train()
        recipe.cleanup()
    client = mlflow.MlflowClient()
    for key in ("moe/load_entropy", "moe/over_capacity_frac", "moe/router_z_loss", "grad_norm",
                "kl_theta_ref_k3", "clip_frac", "ratio_max", "is_truncated_frac", "moe/load/l1/e3",
                "mismatch_kl_replay"):
        history = client.get_metric_history(run.info.run_id, key)
        assert sorted(m.step for m in history) == list(range(steps)), key
    no_replay = client.get_metric_history(run.info.run_id, "mismatch_kl_no_replay")
    assert sorted(m.step for m in no_replay) == [0, 2]
    stale = client.get_metric_history(run.info.run_id, "data/rows_stale")
    assert [m.value for m in stale] == [0.0]
    loads = [client.get_metric_history(run.info.run_id, f"moe/load/l0/e{e}")[0].value
             for e in range(4)]
    assert sum(loads) == pytest.approx(1.0, abs=1e-5)

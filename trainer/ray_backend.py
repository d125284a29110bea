"""Ray Train: N workers of the same recipe under ``TorchTrainer`` (gloo on CPU, NCCL on GPUs).

Every worker builds the same ``RLRecipe``; Ray initialises torch.distributed, the recipe sees the
process group, trains on its share of each batch and averages gradients (torch backend) or lets
DeepSpeed do it (deepspeed backend). Rank 0 writes the checkpoint — the same safetensors + JSON
format as every other path — and reports the metrics.

``start_local_ray`` starts the one-node Ray that tests and the CPU toy path use, every Ray
server bound to loopback. On a cluster ``ray.init(address=...)`` is the caller's.

Left out: Ray cluster management, fault tolerance / elastic restarts, Ray Data ingestion (rows
are read from one Parquet file).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from trainer.config import TrainerConfig

LOOPBACK_ENV = {
    # Ray maps "127.0.0.1" to the machine's routable address and binds its servers there unless
    # it believes it runs on a laptop; this switch (ray/_private/ray_constants.py) keeps the node
    # address, and so every Ray server, on loopback. Read when ``ray`` is first imported.
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_AUTH_MODE": "disabled",
}


def use_loopback_env() -> None:
    """Set ``LOOPBACK_ENV`` (keeping values already set); call before anything imports ``ray``."""
    for key, value in LOOPBACK_ENV.items():
        os.environ.setdefault(key, value)


def start_local_ray(num_cpus: int, temp_dir: Path) -> str:
    """``ray.init`` a one-node Ray on 127.0.0.1; returns the GCS address. Stop: ``ray.shutdown()``.

    Raises RuntimeError when ``ray`` was imported before ``LOOPBACK_ENV`` was set (its servers
    would listen on every interface); the caller then sets the environment before importing it.
    """
    use_loopback_env()
    import ray
    from ray._private import ray_constants

    if ray_constants.ENABLE_RAY_CLUSTER:
        raise RuntimeError("ray was imported before RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 was set; "
                           "its servers would bind to every interface")
    ray.init(num_cpus=num_cpus, _node_ip_address="127.0.0.1", _temp_dir=str(temp_dir),
             include_dashboard=False, runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}})
    return ray.get_runtime_context().gcs_address


def _worker_loop(loop_config: dict) -> None:
    import pyarrow.parquet as pq
    import ray.train

    from trainer.recipe import run_training

    config = TrainerConfig.model_validate_json(loop_config["config"])
    metrics = run_training(Path(loop_config["champion"]), pq.read_table(loop_config["rows"]),
                           config, Path(loop_config["out"]),
                           current_version=loop_config["current_version"])
    metrics = {k: float(v) for k, v in metrics.items()}
    if ray.train.get_context().get_world_rank() == 0:
        (Path(loop_config["out"]) / "metrics.json").write_text(json.dumps(metrics, indent=2))
    ray.train.report(metrics)


def run_training_ray(champion_dir: Path, rows_path: Path, config: TrainerConfig, out_dir: Path,
                     *, num_workers: int = 2, current_version: int | None = None,
                     storage_path: Path | None = None) -> dict[str, float]:
    """Run the recipe on ``num_workers`` Ray Train workers; returns rank 0's metrics."""
    import torch
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    use_gpu = torch.cuda.is_available()
    trainer = TorchTrainer(
        _worker_loop,
        train_loop_config={"champion": str(champion_dir), "rows": str(rows_path),
                           "out": str(out_dir), "config": config.model_dump_json(),
                           "current_version": current_version},
        scaling_config=ScalingConfig(num_workers=num_workers, use_gpu=use_gpu),
        torch_config=TorchConfig(backend="nccl" if use_gpu else "gloo"),
        run_config=RunConfig(storage_path=str(storage_path or Path(out_dir).parent / "ray"),
                             name="ratchet-train"),
    )
    trainer.fit()
    return json.loads((Path(out_dir) / "metrics.json").read_text())

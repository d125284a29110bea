"""Make sure the registry has a champion: the first one is a supervised warm start.

Idempotent: if alias ``champion`` is set, nothing happens. Otherwise the toy MoE is warm-started on
the task family (to a mediocre pass rate, leaving room for RL), logged as version 1 and aliased
``champion``. Deliberately left out: gating the bootstrap champion (there is nothing to compare
it with; its held-out pass rate is logged instead).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from ratchet import registry
from ratchet.config import RatchetConfig

log = logging.getLogger(__name__)


def ensure_champion(config: RatchetConfig, *, tracking_uri: str, workdir: Path) -> int:
    version = registry.resolve_alias(tracking_uri, config.model_name, registry.CHAMPION)
    if version is not None:
        return version
    import mlflow

    from trainer.checkpoint import save_checkpoint
    from trainer.model import MoEConfig
    from trainer.sft import warm_start

    cfg = config.champion
    model_config = MoEConfig.model_validate_json(cfg.model_config_path.read_text())
    mlflow.set_tracking_uri(tracking_uri)
    mlflow.set_experiment(config.experiment)
    with mlflow.start_run(run_name="bootstrap-champion"):
        mlflow.set_tag("ratchet.stage", "bootstrap")
        mlflow.log_dict(model_config.model_dump(), "model_config.json")
        start = time.perf_counter()
        model = warm_start(model_config, seed=cfg.seed, steps=cfg.sft_steps)
        seconds = time.perf_counter() - start
        mlflow.log_metric("warm_start_seconds", seconds)
        out = workdir / "checkpoints" / "bootstrap"
        save_checkpoint(model, out, metadata={"origin": "warm_start", "seed": cfg.seed})
        ref = registry.log_checkpoint(
            out, model_name=config.model_name, alias=registry.CHAMPION,
            tags={"ratchet.origin": "warm_start"},
        )
    log.info("bootstrapped champion v%d in %.1f s", ref.version, seconds)
    return ref.version

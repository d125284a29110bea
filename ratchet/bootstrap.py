"""Make sure the registry has a champion: the first one is a supervised warm start.

Idempotent: if alias ``champion`` is set, nothing happens. Otherwise the toy MoE is warm-started on
the task family (to a mediocre pass rate, leaving room for RL), logged as version 1 and aliased
``champion``. The warm start is deterministic for (model config, seed, steps), so its result is
cached under ``.cache/warm_start/<key>`` like any other one-time build cost; a cached start is
reported as such in the bootstrap run. Deliberately left out: gating the bootstrap champion
(there is nothing to compare it with; every cycle's gate reports the champion's pass rate).
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import time
from pathlib import Path

from ratchet.config import RatchetConfig
from runtime import registry

log = logging.getLogger(__name__)

CACHE = Path(__file__).resolve().parent.parent / ".cache" / "warm_start"


def ensure_champion(config: RatchetConfig, *, tracking_uri: str, workdir: Path) -> int:
    version = registry.resolve_alias(tracking_uri, config.model_name, registry.CHAMPION)
    if version is not None:
        return version
    import mlflow

    from policy.toy.model import MoEConfig

    cfg = config.champion
    model_config = MoEConfig.model_validate_json(cfg.model_config_path.read_text())
    mlflow.set_tracking_uri(tracking_uri)
    mlflow.set_experiment(config.experiment)
    with mlflow.start_run(run_name="bootstrap-champion"):
        mlflow.set_tags({"ratchet.stage": "bootstrap", "ratchet.model": config.model_name})
        mlflow.log_dict(model_config.model_dump(), "model_config.json")
        start = time.perf_counter()
        out, cached = _warm_start_cached(model_config, seed=cfg.seed, steps=cfg.sft_steps)
        seconds = time.perf_counter() - start
        mlflow.log_metric("warm_start_seconds", seconds)
        mlflow.set_tag("warm_start_cached", str(cached).lower())
        ref = registry.log_checkpoint(
            out, model_name=config.model_name, alias=registry.CHAMPION,
            tags={"ratchet.origin": "warm_start"},
        )
    log.info("bootstrapped champion v%d in %.1f s", ref.version, seconds)
    return ref.version


def _warm_start_cached(model_config, *, seed: int, steps: int) -> tuple[Path, bool]:
    """The checkpoint directory of warm_start(model_config, seed, steps), computed at most once."""
    from policy.toy.checkpoint import save_checkpoint
    from trainer.sft import warm_start

    key = hashlib.sha256(
        f"{model_config.model_dump_json()}|{seed}|{steps}".encode()
    ).hexdigest()[:16]
    out = CACHE / key
    if (out / "model.safetensors").exists():
        return out, True
    model = warm_start(model_config, seed=seed, steps=steps)
    tmp = CACHE / f".{key}.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    save_checkpoint(model, tmp, metadata={"origin": "warm_start", "seed": seed, "steps": steps})
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out, False

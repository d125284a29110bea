"""Make sure the registry has a champion: the first one is a supervised warm start.

Idempotent: if alias ``champion`` is set, nothing happens. Otherwise the configured policy
(``config.policy``) becomes version 1, aliased ``champion``: the toy MoE is warm-started on the
task family (to a mediocre pass rate, leaving room for RL), or a toy checkpoint given by ``path``
is logged as it is; a Hugging Face policy is built (a tiny random model from its ``build`` spec,
or loaded from ``path``) and warm-started the same way through the policy plug
(trainer/sft_policy.py). Warm starts are deterministic for their recipe (model config, seed,
steps), so the result is cached under ``.cache/warm_start/<key>`` (toy) or
``.cache/ratchet/hf-champion-<key>`` (HF) like any other one-time build cost; a cached start is
reported as such in the bootstrap run. Deliberately left out: gating the bootstrap champion (there
is nothing to compare it with; every cycle's gate reports the champion's pass rate).
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
HF_CACHE = Path(__file__).resolve().parent.parent / ".cache" / "ratchet"
HF_RECIPE = "sft_policy-v1"
"""Bumped when trainer/sft_policy.py or policy/tiny.py change what a cached HF champion holds."""


def ensure_champion(config: RatchetConfig, *, tracking_uri: str, workdir: Path) -> int:
    """The ``champion`` version, bootstrapped when the model has none.

    Idempotent: a bootstrap killed after its version was registered but before the tags and
    alias landed left that version behind; a rerun completes it instead of registering another.
    """
    version = registry.resolve_alias(tracking_uri, config.model_name, registry.CHAMPION)
    if version is not None:
        return version
    left = _left_by_a_killed_bootstrap(tracking_uri, config.model_name)
    if left is not None:
        registry.set_version_tags(tracking_uri, config.model_name, left,
                                  {"ratchet.origin": _origin(config)})
        registry.set_alias(tracking_uri, config.model_name, registry.CHAMPION, left)
        log.warning("completed champion v%d, registered by a bootstrap that was killed", left)
        return left
    import mlflow

    cfg = config.champion
    registry.use_experiment(tracking_uri, config.experiment)
    with mlflow.start_run(run_name="bootstrap-champion"):
        mlflow.set_tags({"ratchet.stage": "bootstrap", "ratchet.model": config.model_name,
                         "ratchet.policy": config.policy.type})
        mlflow.log_dict(config.policy.model_dump(mode="json"), "policy_config.json")
        start = time.perf_counter()
        origin = _origin(config)
        if config.policy.type == "hf":
            out, cached = hf_first_champion(config, workdir=workdir)
        elif config.policy.path is not None:
            out, cached = config.policy.path, True
        else:
            from policy.toy.model import MoEConfig

            model_config = MoEConfig.model_validate_json(cfg.model_config_path.read_text())
            mlflow.log_dict(model_config.model_dump(), "model_config.json")
            out, cached = _toy_champion(cfg, model_config)
        seconds = time.perf_counter() - start
        mlflow.log_metric("warm_start_seconds", seconds)
        mlflow.set_tag("warm_start_cached", str(cached).lower())
        ref = registry.log_checkpoint(
            out, model_name=config.model_name, alias=registry.CHAMPION,
            tags={"ratchet.origin": origin},
        )
    log.info("first champion v%d registered (%s) in %.1f s", ref.version, origin, seconds)
    return ref.version


def _origin(config: RatchetConfig) -> str:
    if config.policy.type != "hf" and config.policy.path is None and config.champion.lazy_fix:
        return "warm_start + planted lazy-fix habit (trainer/habit.py)"
    return "warm_start"


def _left_by_a_killed_bootstrap(tracking_uri: str, model_name: str) -> int | None:
    """The newest version registered by a ``bootstrap-champion`` run that never got its
    ``ratchet.origin`` tag (the bootstrap died between registering and tagging), if any."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    client = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
    try:
        versions = client.search_model_versions(f"name = '{model_name}'")
    except MlflowException:
        return None
    for v in sorted(versions, key=lambda v: -int(v.version)):
        if "ratchet.origin" in v.tags or not v.run_id:
            continue
        if client.get_run(v.run_id).data.tags.get("ratchet.stage") == "bootstrap":
            return int(v.version)
    return None


def _toy_champion(cfg, model_config) -> tuple[Path, bool]:
    """The toy warm start: for the project's own model config, the committed or cached champion
    of ``trainer.fixtures`` (the one the learning tests and benches start from), or its lazy-fix
    variant (``champion.lazy_fix``); for any other config, this module's own cache."""
    from policy.toy.model import MoEConfig
    from trainer.fixtures import TOY_CONFIG, champion_dir, champion_path

    if model_config != MoEConfig.model_validate_json(TOY_CONFIG.read_text()):
        return _warm_start_cached(model_config, seed=cfg.seed, steps=cfg.sft_steps)
    if cfg.lazy_fix:
        from trainer.fixtures import lazy_champion_dir, lazy_champion_path

        cached = (lazy_champion_path() / "model.safetensors").exists()
        return lazy_champion_dir(), cached  # committed, or built once in about a minute
    cached = (champion_path(cfg.seed, cfg.sft_steps) / "model.safetensors").exists()
    return champion_dir(cfg.seed, cfg.sft_steps), cached


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


def hf_first_champion(config: RatchetConfig, *, workdir: Path) -> tuple[Path, bool]:
    """The folder of an HF preset's first champion (built once, then cached), and whether it was
    cached: the same weights for the same policy config, warm start and library versions."""
    cfg = config.champion
    return _hf_champion_cached(config.policy, seed=cfg.seed, steps=cfg.sft_steps,
                               workdir=workdir)


def hf_champion_key(policy_config, *, seed: int, steps: int) -> str:
    """Cache key of an HF champion: its policy config, the warm start's seed and steps, the
    recipe version and the transformers version that built it."""
    import transformers

    recipe = f"{policy_config.model_dump_json()}|{seed}|{steps}|{HF_RECIPE}|" \
             f"{transformers.__version__}"
    return hashlib.sha256(recipe.encode()).hexdigest()[:16]


def _hf_champion_cached(policy_config, *, seed: int, steps: int, workdir: Path
                        ) -> tuple[Path, bool]:
    """The HF directory of the warm-started policy, built and trained at most once."""
    import tempfile

    from policy.loader import load_policy
    from trainer.sft_policy import warm_start_policy

    key = hf_champion_key(policy_config, seed=seed, steps=steps)
    out = HF_CACHE / f"hf-champion-{key}"
    if (out / "config.json").exists():
        return out, True
    HF_CACHE.mkdir(parents=True, exist_ok=True)
    policy = load_policy(policy_config, workdir=Path(workdir) / "hf-build")
    curve = warm_start_policy(policy, seed=seed, steps=steps) if steps else []
    tmp = Path(tempfile.mkdtemp(prefix=f".hf-champion-{key}.", dir=HF_CACHE))
    policy.save(tmp, metadata={"origin": "warm_start", "seed": seed, "steps": steps,
                               "final_ce": curve[-1] if curve else None, **policy.describe()})
    try:
        tmp.rename(out)
    except OSError:  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
    if curve:
        log.info("warm-started HF champion %s (%d steps, final CE %.3f)", out.name, steps,
                 curve[-1])
    else:
        log.info("built HF champion %s (no warm start)", out.name)
    return out, False


def describe_champion(config: RatchetConfig, *, tracking_uri: str, workdir: Path) -> dict:
    """``Policy.describe()`` of the registry's champion (downloaded and loaded)."""
    from policy.loader import load_policy

    version = registry.resolve_alias(tracking_uri, config.model_name, registry.CHAMPION)
    if version is None:
        return {"type": config.policy.type}
    directory = registry.download_checkpoint(tracking_uri, config.model_name, version,
                                             Path(workdir) / "checkpoints")
    return {**load_policy(directory).describe(), "version": version}

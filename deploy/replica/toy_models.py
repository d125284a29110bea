"""Register an untrained toy MoE as a model version — for serving tests, benches and smoke runs.

Serving does not care whether weights are good, only that they load and sample; an untrained
model from ``trainer/configs/toy.json`` with weights drawn from ``seed`` registers in a second
instead of a warm start's minute. Deliberately left out: anything that should be *good*
(ratchet/bootstrap.py warm-starts the real champion).
"""

from __future__ import annotations

from pathlib import Path

TOY_CONFIG = Path(__file__).resolve().parents[2] / "trainer" / "configs" / "toy.json"


def build_untrained(seed: int):
    """The toy MoETransformer with weights drawn from ``seed`` (eval mode)."""
    import torch

    from policy.toy.model import MoEConfig, MoETransformer

    torch.manual_seed(seed)
    return MoETransformer(MoEConfig.model_validate_json(TOY_CONFIG.read_text())).eval()


def register_untrained(
    tracking_uri: str, model_name: str, *, seed: int, workdir: Path, alias: str | None = None
) -> int:
    """Save ``build_untrained(seed)`` in ``workdir``, log and register it; returns the version."""
    import mlflow

    from policy.toy.checkpoint import save_checkpoint
    from runtime import registry

    directory = save_checkpoint(
        build_untrained(seed),
        Path(workdir) / f"untrained-seed{seed}",
        metadata={"origin": "untrained", "seed": seed},
    )
    mlflow.set_tracking_uri(tracking_uri)
    with mlflow.start_run(run_name=f"untrained-seed{seed}"):
        ref = registry.log_checkpoint(
            directory, model_name=model_name, alias=alias, tags={"ratchet.origin": "untrained"}
        )
    return ref.version

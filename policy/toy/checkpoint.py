"""Checkpoints: ``model.safetensors`` + ``config.json`` (MoEConfig) + ``metadata.json``.

One format for every backend (plain torch, DeepSpeed, Ray workers save the same three files), and
loading never unpickles: weights come from safetensors, the architecture from this repo's code.
Left out: optimizer state (RL restarts from the champion each cycle) and MLflow logging
(gating/ and the cycle log the directory as an artifact).
"""

from __future__ import annotations

import json
from pathlib import Path

from policy.toy.model import MoEConfig, MoETransformer

WEIGHTS = "model.safetensors"
CONFIG = "config.json"
METADATA = "metadata.json"


def save_checkpoint(
    model: MoETransformer, directory: Path, *, metadata: dict | None = None
) -> Path:
    """Write the three files into ``directory`` (created if missing); returns the directory."""
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    save_file(state, str(directory / WEIGHTS), metadata={"format": "pt"})
    (directory / CONFIG).write_text(model.config.model_dump_json(indent=2))
    (directory / METADATA).write_text(json.dumps(metadata or {}, indent=2, sort_keys=True))
    return directory


def load_config(directory: Path) -> MoEConfig:
    return MoEConfig.model_validate_json((Path(directory) / CONFIG).read_text())


def load_metadata(directory: Path) -> dict:
    path = Path(directory) / METADATA
    return json.loads(path.read_text()) if path.exists() else {}


def load_checkpoint(directory: Path) -> MoETransformer:
    """Rebuild the model from ``config.json`` and load the safetensors weights (strict)."""
    from safetensors.torch import load_file

    directory = Path(directory)
    model = MoETransformer(load_config(directory))
    model.load_state_dict(load_file(str(directory / WEIGHTS)), strict=True)
    model.eval()
    return model

"""Command line for one RL update: ``python -m trainer.cli --champion DIR --rows FILE.parquet
--out DIR [--config JSON] [--current-version N]``.

Thin: parse arguments, validate the TrainerConfig, then import torch and run
:func:`trainer.recipe.run_training`. Launch it under ``torchrun`` / ``deepspeed`` for several
ranks (backend ``deepspeed``); each rank trains on its share of every batch and rank 0 writes the
checkpoint and ``metrics.json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from trainer.config import TrainerConfig


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m trainer.cli", description=__doc__.splitlines()[0])
    p.add_argument("--champion", type=Path, required=True, help="Champion checkpoint directory.")
    p.add_argument("--rows", type=Path, required=True, help="Reward rows (Parquet).")
    p.add_argument("--out", type=Path, required=True, help="Candidate checkpoint directory.")
    p.add_argument("--config", default="{}", help="TrainerConfig as JSON (or @file.json).")
    p.add_argument("--current-version", type=int, default=None)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, float]:
    args = parse(argv)
    raw = Path(args.config[1:]).read_text() if args.config.startswith("@") else args.config
    config = TrainerConfig.model_validate_json(raw)
    import pyarrow.parquet as pq

    from trainer.recipe import run_training

    metrics = run_training(args.champion, pq.read_table(args.rows), config, args.out,
                           current_version=args.current_version)
    if (args.out / "model.safetensors").exists():
        (args.out / "metrics.json").write_text(json.dumps(metrics, indent=2, sort_keys=True))
    return metrics


if __name__ == "__main__":
    main()

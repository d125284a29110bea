"""Wall time of one full gate run on the toy suite (goal: <= 60 s on 2 cores).

    python bench/gate.py [--size 64] [--max-new-tokens 32] [--sft-steps 0] [--infra]

Starts a local MLflow server, registers a champion and a candidate (the toy config
``trainer/configs/toy.json``; untrained by default, which is the worst case for decoding: every
answer runs to ``max_new_tokens``; ``--sft-steps N`` warm-starts both for N steps instead), then
times ``gating.gate.run_gate`` end to end from a cold work directory: both downloads, both suites
(no cache), health and KL, every gate, the MLflow run with its artifacts, the version tags, and the
promotion. ``--infra`` adds the serving-process check.

Prints the figures and writes ``bench/results/gate.json`` with key ``seconds`` (plus the suite
seconds of each model and the settings).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODEL = "bench-gate"


def _models(steps: int):
    import torch

    from policy.toy.model import MoEConfig, MoETransformer
    from trainer.sft import warm_start

    cfg = MoEConfig.model_validate_json((ROOT / "trainer/configs/toy.json").read_text())
    if steps > 0:
        return warm_start(cfg, seed=0, steps=steps), warm_start(cfg, seed=1, steps=steps)
    torch.manual_seed(0)
    champion = MoETransformer(cfg)
    torch.manual_seed(1)
    return champion, MoETransformer(cfg)


def _register(uri: str, models, workdir: Path) -> list[int]:
    import mlflow

    from policy.toy.checkpoint import save_checkpoint
    from runtime.registry import CHAMPION, log_checkpoint

    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment("bench-gate")
    versions = []
    for i, model in enumerate(models):
        d = save_checkpoint(model, workdir / f"m{i}" / "checkpoint")
        with mlflow.start_run():
            ref = log_checkpoint(d, model_name=MODEL, alias=CHAMPION if i == 0 else None)
        versions.append(ref.version)
    return versions


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--sft-steps", type=int, default=0)
    p.add_argument("--infra", action="store_true")
    p.add_argument("--out", type=Path, default=ROOT / "bench/results/gate.json")
    args = p.parse_args(argv)

    import torch

    from gating.config import GateConfig, InfraConfig, SuiteConfig
    from gating.gate import run_gate
    from runtime.services import MlflowServer

    torch.set_num_threads(2)
    config = GateConfig(
        suite=SuiteConfig(size=args.size, max_new_tokens=args.max_new_tokens), min_pass_rate=0.0,
        infra=InfraConfig() if args.infra else None,
    )
    with tempfile.TemporaryDirectory(prefix="bench-gate-") as tmp:
        workdir = Path(tmp)
        with MlflowServer.start(workdir / "mlflow") as server:
            champion, candidate = _register(server.uri, _models(args.sft_steps), workdir)
            start = time.perf_counter()
            verdict = run_gate(tracking_uri=server.uri, model_name=MODEL,
                               candidate_version=candidate, champion_version=champion,
                               config=config, workdir=workdir / "gate")
            seconds = time.perf_counter() - start
    result = {
        "seconds": round(seconds, 2),
        "goal_seconds": 60.0,
        "suite_size": args.size,
        "max_new_tokens": args.max_new_tokens,
        "sft_steps": args.sft_steps,
        "infra": args.infra,
        "candidate_suite_seconds": round(verdict.extras["candidate.suite_seconds"], 2),
        "candidate_mean_completion_tokens": verdict.candidate.mean_completion_tokens,
        "gates": len(verdict.gates),
        "passed": verdict.passed,
        "load_average_1m": round(os.getloadavg()[0], 2),
        "laps": {k: round(x, 2) for k, x in verdict.extras.items() if k.startswith("seconds.")},
    }
    print(json.dumps(result, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

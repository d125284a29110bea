"""Alpha spending continues across processes: the state lives on the registered model in MLflow.

Two gate decisions of one model, each in its own Python process against the real MLflow server
(a resumed or rescheduled loop): the second runs at alpha_2, not alpha_1, on another suite draw,
and each gate run records the level and the draw it used.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]

_GATE = """
import sys
from pathlib import Path
from gating.config import ErrorControlConfig, GateConfig, SuiteConfig
from gating.gate import run_gate
uri, name, cand, champ, work = sys.argv[1:6]
config = GateConfig(suite=SuiteConfig(size=12, max_new_tokens=4), min_pass_rate=0.0,
                    error_control=ErrorControlConfig(rule="lord"))
v = run_gate(tracking_uri=uri, model_name=name, candidate_version=int(cand),
             champion_version=None if champ == "-" else int(champ), config=config,
             workdir=Path(work))
print("RUN", v.run_id)
"""


def _register(uri: str, name: str, seed: int, directory: Path) -> int:
    import mlflow
    import torch

    from policy.toy.checkpoint import save_checkpoint
    from policy.toy.model import MoEConfig, MoETransformer
    from runtime.registry import log_checkpoint

    torch.manual_seed(seed)
    model = MoETransformer(MoEConfig(d_model=32, n_layers=2, n_heads=2, d_ff=64)).eval()
    save_checkpoint(model, directory / "checkpoint")
    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment("alpha-spending-register")
    with mlflow.start_run():
        return log_checkpoint(directory / "checkpoint", model_name=name).version


def _gate_in_a_new_process(uri: str, name: str, cand: int, champ: int | None, work: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", _GATE, uri, name, str(cand), "-" if champ is None else str(champ),
         str(work)], env=env, capture_output=True, text=True, timeout=300, cwd=ROOT, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    return next(line.split()[1] for line in out.stdout.splitlines() if line.startswith("RUN "))


def test_alpha_k_continues_across_a_resumed_loop(mlflow_server, tmp_path):
    from mlflow import MlflowClient

    from runtime.registry import model_tags

    uri, name = mlflow_server.uri, f"alpha-{uuid.uuid4().hex[:8]}"
    champ = _register(uri, name, 0, tmp_path / "a")
    cand = _register(uri, name, 1, tmp_path / "b")
    _gate_in_a_new_process(uri, name, champ, None, tmp_path / "w0")  # bootstrap: no decision
    assert "ratchet.alpha.k" not in model_tags(uri, name)

    client = MlflowClient(tracking_uri=uri)
    first = client.get_run(_gate_in_a_new_process(uri, name, cand, champ, tmp_path / "w1"))
    assert model_tags(uri, name)["ratchet.alpha.k"] == "1"
    second = client.get_run(_gate_in_a_new_process(uri, name, cand, champ, tmp_path / "w2"))
    tags = model_tags(uri, name)
    assert tags["ratchet.alpha.k"] == "2" and tags["ratchet.alpha.promotions"] == ""

    # LORD++ with alpha = 0.05, W0 = 0.025, gamma_j = 1 / (j (j + 1)), no promotion yet.
    assert float(first.data.tags["gate.alpha_k"]) == pytest.approx(0.025 / 2)
    assert float(second.data.tags["gate.alpha_k"]) == pytest.approx(0.025 / 6)
    assert first.data.metrics["alpha_k"] == pytest.approx(0.025 / 2)
    assert float(tags["ratchet.alpha.spent"]) == pytest.approx(0.025 / 2 + 0.025 / 6)
    # Each decision drew its own suite.
    assert (first.data.tags["gate.suite.decision"], second.data.tags["gate.suite.decision"]) == (
        "1", "2")
    assert first.data.tags["gate.suite.seed"] != second.data.tags["gate.suite.seed"]

"""The shipped tiny Qwen3-MoE preset through the whole loop: ``ratchet demo`` with
configs/tiny-qwen3moe.json for one cycle on its own real broker and MLflow server — the HF champion
is built (or taken from the cache) and warm-started, the fleet serves it, the simulator's traffic
is ingested, an RL update makes an HF candidate, and the gate loads and judges it.

Smaller than the preset (fewer requests, a shorter gate suite) so the test fits the integration
tier; the warm start is the preset's, so its cached champion is shared with the demo."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PRESET = Path(__file__).resolve().parents[2] / "configs" / "tiny-qwen3moe.json"


def test_tiny_qwen3moe_preset_runs_a_cycle_and_gates_an_hf_candidate(tmp_path):
    import os
    import subprocess
    import sys

    from policy.loader import load_policy
    from ratchet.config import load_config
    from runtime import registry

    config = load_config(PRESET)
    config = config.model_copy(update={
        "model_name": f"{config.model_name}-it",
        "simulator": config.simulator.model_copy(update={"requests_per_round": 96}),
        "gate": config.gate.model_copy(update={
            "suite": config.gate.suite.model_copy(update={"size": 32})}),
        "fleet": config.fleet.model_copy(update={"replicas": 1}),
    })
    config_file = tmp_path / "tiny-qwen3moe-it.json"
    config_file.write_text(config.model_dump_json())
    workdir = tmp_path / "demo"
    # The CLI in its own process, as a user runs it (MLflow's process-global run and experiment
    # state stays out of this test session).
    env = {**os.environ, "PYTHONPATH": str(PRESET.parents[1])}
    done = subprocess.run(
        [sys.executable, "-m", "ratchet.cli", "demo", "--config", str(config_file), "--cycles",
         "1", "--workdir", str(workdir)], cwd=PRESET.parents[1], env=env, capture_output=True,
        text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-3000:]

    summary = json.loads((workdir / "demo_summary.json").read_text())
    policy = summary["policy"]
    assert policy["type"] == "hf" and policy["model_type"] == "qwen3_moe"
    assert policy["n_experts"] == 4 and policy["top_k"] == 2 and policy["moe_layers"] == [0, 1]
    (cycle,) = summary["cycles"]
    assert cycle["span_rows"] > 0, cycle
    assert cycle["candidate_version"] == cycle["champion_version"] + 1
    assert cycle["outcome"] in ("promoted", "rejected", "rolled back"), cycle
    assert cycle["gate_run_id"] and cycle["gate_tasks"] == 32

    # The gated candidate is an HF checkpoint in the registry with its verdict recorded (the
    # demo stopped its MLflow server: a new one over the demo's store reads it back).
    from mlflow import MlflowClient

    from runtime.services import MlflowServer

    server = MlflowServer.start(workdir / "mlflow")
    try:
        uri = server.uri
        tags = registry.version_tags(uri, config.model_name, cycle["candidate_version"])
        assert tags["gate.verdict"] in ("pass", "fail") and tags.get("gate.loads") != "fail"
        gate_run = MlflowClient(tracking_uri=uri).get_run(cycle["gate_run_id"])
        assert gate_run.data.metrics["candidate.n_tasks"] == 32
        directory = registry.download_checkpoint(uri, config.model_name,
                                                 cycle["candidate_version"], tmp_path / "dl")
    finally:
        server.stop()
    candidate = load_policy(directory)
    assert candidate.type == "hf" and candidate.moe_spec.family == "qwen3_moe"

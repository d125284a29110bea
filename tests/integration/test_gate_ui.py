"""The MLflow UI, rendered by headless Chromium, shows the gate run and the version's verdict."""

from __future__ import annotations

import pytest

from gating.ui_check import find_chromium

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(find_chromium() is None, reason="chromium is not installed"),
]

MODEL = "gate-ui-test"


def test_gate_verdict_is_visible_in_the_mlflow_ui(mlflow_server, tmp_path):
    import mlflow
    import torch

    from gating.config import GateConfig, SuiteConfig
    from gating.gate import run_gate
    from gating.ui_check import check_gate_in_ui
    from policy.toy.checkpoint import save_checkpoint
    from policy.toy.model import MoEConfig, MoETransformer
    from runtime.registry import log_checkpoint

    torch.manual_seed(0)
    model = MoETransformer(MoEConfig(d_model=32, n_layers=2, n_heads=2, d_ff=64))
    ckpt = save_checkpoint(model, tmp_path / "m" / "checkpoint")
    mlflow.set_tracking_uri(mlflow_server.uri)
    mlflow.set_experiment("gate-ui-test")
    with mlflow.start_run():
        version = log_checkpoint(ckpt, model_name=MODEL).version
    # An untrained model scores 0: a threshold of 0.5 makes this a visible FAIL.
    config = GateConfig(suite=SuiteConfig(size=8, max_new_tokens=8), min_pass_rate=0.5)
    verdict = run_gate(tracking_uri=mlflow_server.uri, model_name=MODEL, candidate_version=version,
                       champion_version=None, config=config, workdir=tmp_path / "gate")
    assert not verdict.passed

    pages = check_gate_in_ui(mlflow_server.uri, MODEL, version, out=tmp_path / "shots")
    for page in pages:
        assert page.ok, f"{page.url} is missing {page.missing}"
        assert page.screenshot is not None and page.screenshot.stat().st_size > 10_000
    assert any("fail" in p.expected for p in pages)

"""The gate against a real MLflow server: only a pass moves ``champion``.

Checkpoints: the warm-started toy champion (decent), an untrained one (worse) and the decent one
with a NaN weight. Each is registered as a model version; ``run_gate`` must promote the decent
one at bootstrap, refuse the worse and the NaN one (alias unchanged, verdict in the version's
tags), refuse a better but unrelated one on the KL ceiling, and with that ceiling lifted promote
it over a worse champion (old one kept as ``previous-champion``), served by a real replica.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MODEL = "gate-test"


def _config_file(tmp_path: Path) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_name": MODEL}))
    return path


def _register(tracking_uri: str, model, directory: Path) -> int:
    import mlflow

    from policy.toy.checkpoint import save_checkpoint
    from runtime.registry import log_checkpoint

    save_checkpoint(model, directory / "checkpoint")
    mlflow.set_tracking_uri(tracking_uri)
    mlflow.set_experiment("gate-test-register")
    with mlflow.start_run():
        return log_checkpoint(directory / "checkpoint", model_name=MODEL).version


@pytest.fixture(scope="module")
def versions(mlflow_server, tmp_path_factory) -> dict[str, int]:
    """decent: the cached warm-started toy champion (trainer.fixtures, shared with the trainer
    tests); worse: an untrained toy model; nan: decent with one NaN weight."""
    import torch

    from policy.toy.checkpoint import load_checkpoint
    from policy.toy.model import MoETransformer
    from trainer.fixtures import champion_dir

    torch.set_num_threads(2)
    decent = load_checkpoint(champion_dir())
    torch.manual_seed(1)
    worse = MoETransformer(decent.config)
    root = tmp_path_factory.mktemp("gate-ckpts")
    out = {
        "decent": _register(mlflow_server.uri, decent, root / "decent"),
        "worse": _register(mlflow_server.uri, worse, root / "worse"),
    }
    with torch.no_grad():
        decent.lm_head.weight[0, 0] = float("nan")
    out["nan"] = _register(mlflow_server.uri, decent, root / "nan")
    return out


def _config(**update):
    from gating.config import ErrorControlConfig, GateConfig, SuiteConfig

    # One decision's level (one-sided 2.5% per route to a win), not a lifetime schedule: this
    # module is about promotion mechanics; alpha spending has tests/integration/
    # test_gate_alpha_spending.py.
    return GateConfig(
        suite=SuiteConfig(size=32, seed=3, max_new_tokens=24),
        min_pass_rate=0.05,
        error_control=ErrorControlConfig(rule="fixed", alpha=0.05),
        **update,
    )


def _gate(uri: str, candidate: int, champion: int | None, workdir: Path, **update):
    from gating.gate import run_gate

    return run_gate(tracking_uri=uri, model_name=MODEL, candidate_version=candidate,
                    champion_version=champion, config=_config(**update), workdir=workdir)


def _alias(uri: str, alias: str) -> int | None:
    from runtime.registry import resolve_alias

    return resolve_alias(uri, MODEL, alias)


def _version_tags(uri: str, version: int) -> tuple[dict[str, str], str]:
    from mlflow import MlflowClient

    mv = MlflowClient(tracking_uri=uri, registry_uri=uri).get_model_version(MODEL, str(version))
    return dict(mv.tags), mv.description or ""


def test_gate_promotes_only_on_pass(mlflow_server, versions, tmp_path):
    import mlflow
    from mlflow import MlflowClient

    from gating.show import format_gate_table

    uri, work = mlflow_server.uri, tmp_path / "gate"
    client = MlflowClient(tracking_uri=uri)

    # Bootstrap: no champion, the absolute gates decide -> promoted.
    boot = _gate(uri, versions["decent"], None, work)
    assert boot.passed and boot.promoted, boot.failed_gates
    assert boot.champion is None and boot.candidate.pass_rate >= 0.05
    assert _alias(uri, "champion") == versions["decent"]

    # A worse candidate fails; the alias stays; the verdict is on the version and its run.
    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment("gate-test-cycle")
    with mlflow.start_run() as parent:
        worse = _gate(uri, versions["worse"], versions["decent"], work)
    assert not worse.passed and not worse.promoted
    assert "pass_rate_change" in worse.failed_gates
    assert worse.candidate.pass_rate < worse.champion.pass_rate
    assert _alias(uri, "champion") == versions["decent"]
    tags, description = _version_tags(uri, versions["worse"])
    assert tags["gate.verdict"] == "fail" and tags["gate.run_id"] == worse.run_id
    assert tags["gate.pass_rate_change"] == "fail"
    assert worse.run_id in description and "FAIL" in description
    run = client.get_run(worse.run_id)
    assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id
    assert run.data.tags["gate.verdict"] == "fail"
    assert run.data.metrics["gate.pass_rate_change"] == pytest.approx(
        worse.candidate.pass_rate - worse.champion.pass_rate)
    assert "gate.pass_rate_change.ci_low" in run.data.metrics
    assert run.data.params["gate.min_pass_rate"] == "0.05"
    artifacts = {a.path for a in client.list_artifacts(worse.run_id, "gate")}
    assert {"gate/verdict.json", "gate/report.html", "gate/config.json"} <= artifacts
    # Reviewable in the UI: real duration (download + both suites, not just the logging), the
    # CI level, the comparators, and a link relative to the server, not to a host:port.
    assert run.info.end_time - run.info.start_time >= 1000 * worse.extras["seconds.suites"]
    assert run.data.params["gate.ci_level"] == "0.95"
    note = run.data.tags["mlflow.note.content"]
    assert "paired-bootstrap" in note
    assert note.splitlines()[0].endswith(f"**{worse.decision}**")  # the decision comes first
    assert "](#/experiments/" in description and "http://" not in description
    table = format_gate_table(uri, MODEL, versions["worse"])
    assert table.startswith(f"Gate FAIL: {MODEL} v{versions['worse']}")
    assert "pass_rate_change" in table
    store = mlflow_server.workdir  # the same store read with no server (`gates show --workdir`)
    local = format_gate_table(f"sqlite:///{store / 'mlflow.db'}", MODEL, versions["worse"],
                              artifacts_root=store / "artifacts")
    assert local == table
    # A version that does not exist is a bad argument (exit 2), from the store or the server;
    # neither path imports mlflow.
    from gating.show import VersionNotFound

    for where in (uri, f"sqlite:///{store / 'mlflow.db'}"):
        with pytest.raises(VersionNotFound, match="has no version 999"):
            format_gate_table(where, MODEL, 999, artifacts_root=store / "artifacts")
    code = subprocess.run(
        [sys.executable, "-c", "import sys; from ratchet.cli import main; "
         "sys.exit(main(sys.argv[1:]))", "gates", "show", "999", "--tracking-uri", uri,
         "--config", str(_config_file(tmp_path))], capture_output=True, text=True, timeout=120)
    assert code.returncode == 2 and "has no version 999" in code.stderr, code.stderr

    # A NaN checkpoint fails health, whatever else it scores.
    nan = _gate(uri, versions["nan"], versions["decent"], work)
    assert not nan.passed and "finite_weights" in nan.failed_gates
    assert _alias(uri, "champion") == versions["decent"]

    # Better than the champion on every suite gate, but an unrelated model: the KL ceiling
    # (health) alone refuses it.
    far = _gate(uri, versions["decent"], versions["worse"], work)
    assert far.failed_gates == ["kl_to_champion"]
    kl = next(g for g in far.gates if g.name == "kl_to_champion")
    assert math.isfinite(kl.value) and kl.value > kl.threshold


def test_better_candidate_moves_champion_and_keeps_previous(mlflow_server, versions, tmp_path):
    from gating.config import HealthConfig, InfraConfig
    from runtime.registry import set_alias

    uri = mlflow_server.uri
    set_alias(uri, MODEL, "champion", versions["worse"])
    # With the infra check: the candidate is served by a real replica and queried.
    infra = InfraConfig(n_requests=6, max_tokens=8, p95_budget_ms=60_000, startup_timeout_s=300)
    # The worse champion is an unrelated untrained model, so the KL ceiling is lifted here.
    verdict = _gate(uri, versions["decent"], versions["worse"], tmp_path / "gate", infra=infra,
                    health=HealthConfig(max_kl_to_champion=100.0))
    assert verdict.passed and verdict.promoted, verdict.failed_gates
    gates = {g.name: g for g in verdict.gates}
    assert gates["infra_errors"].value == 0 and gates["infra_p95_ms"].passed
    assert verdict.extras["infra.requests"] == 6
    assert _alias(uri, "champion") == versions["decent"]
    assert _alias(uri, "previous-champion") == versions["worse"]
    tags, _ = _version_tags(uri, versions["decent"])
    assert tags["gate.verdict"] == "pass" and tags["gate.run_id"] == verdict.run_id

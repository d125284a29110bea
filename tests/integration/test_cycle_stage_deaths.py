"""A gate stage whose process dies every time: after ``stage_max_deaths`` deaths the cycle records
a failing verdict with the reason and releases the candidate, so no candidate wedges the loop.

Real broker, MLflow server, Beam DirectRunner and the tiny MoE; the cycle runs as a subprocess
(`python -m ratchet.cli cycle`), as in tests/integration/test_cycle_kill.py. The test-only hook
``RATCHET_TEST_DIE_AT=gate`` (ratchet/cycle_state.py) makes the cycle SIGKILL itself when a gate
attempt starts, as an answer that kills the grader's parent did: the process really dies, its
runs are left RUNNING, and the next run must find out from the durable state alone. The hook
stays set on every run, so the last one shows the loop moves on without the stage finishing.
"""

from __future__ import annotations

import signal
import subprocess

import pytest

from tests.integration.test_cycle_kill import ROOT, _argv, _env, _setup

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_a_gate_that_dies_three_times_fails_the_candidate_and_releases_it(
    broker, mlflow_server, tmp_path
):
    from mlflow import MlflowClient

    from ratchet.cycle_state import DIED, CycleStore
    from runtime import registry

    name, config = _setup(broker, tmp_path)
    workdir = tmp_path / "work"
    argv = _argv(config, workdir, broker, mlflow_server)
    env = {**_env(), "RATCHET_TEST_DIE_AT": "gate"}
    uri, store = mlflow_server.uri, CycleStore(workdir / "spans")
    client = MlflowClient(uri)

    for death in (1, 2, 3):  # the default stage_max_deaths
        run = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True,
                             timeout=900)
        assert run.returncode == -signal.SIGKILL, run.stdout[-3000:] + run.stderr[-3000:]
        state = store.unfinished()
        assert state.stage == "trained"  # each rerun re-entered the gate stage
        assert state.stage_failures == {"gate": [DIED] * death}
        assert registry.resolve_alias(uri, name, registry.CANDIDATE) == state.candidate_version
    champion, candidate = state.champion_version, state.candidate_version

    last = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert last.returncode == 0, last.stdout[-3000:] + last.stderr[-3000:]

    (final,) = store.all()
    assert final.stage == "deployed" and final.verdict["passed"] is False
    assert final.verdict["failed"] == "completes" and not final.verdict["promoted"]
    assert final.stage_failures == {}
    # the verdict is recorded like any other: on the version and in a gate run
    tags = registry.version_tags(uri, name, candidate)
    assert tags["gate.verdict"] == "fail" and tags["gate.failed"] == "completes"
    assert tags["gate.died"].startswith("the gate stage ended without a verdict 3 times")
    assert f"3x {DIED}" in tags["gate.died"]
    gate_run = client.get_run(tags["gate.run_id"])
    assert gate_run.data.tags["gate.verdict"] == "fail"
    assert gate_run.data.tags["gate.completes"] == "fail"
    verdict = client.download_artifacts(gate_run.info.run_id, "gate/verdict.json", str(tmp_path))
    assert "ended without a verdict 3 times" in open(verdict).read()
    # the candidate is released, the champion untouched, and no run is left RUNNING
    assert registry.resolve_alias(uri, name, registry.CANDIDATE) is None
    assert registry.resolve_alias(uri, name, registry.CHAMPION) == champion
    exp = client.get_experiment_by_name("ratchet")
    cycle_runs = client.search_runs([exp.experiment_id], f"tags.`ratchet.model` = '{name}'")
    assert not [r for r in cycle_runs if r.info.status == "RUNNING"]
    killed = [r for r in cycle_runs if r.info.status == "KILLED"]
    assert len({r.data.tags.get("mlflow.parentRunId") or r.info.run_id for r in killed}) >= 3
    outcome = [r for r in cycle_runs if r.data.tags.get("ratchet.gate_died")]
    assert len(outcome) == 1 and outcome[0].data.tags["ratchet.outcome"] == "rejected"

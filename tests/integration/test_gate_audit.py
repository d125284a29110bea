"""The lifetime audit against a real MLflow server: due after ``every`` promotions counted from
the versions' own tags, a champion that lost what the anchor did is rolled back (alias, fleet
callback, tags, a recorded run), one that kept it becomes the version to fall back to."""

from __future__ import annotations

import shutil
import uuid

import pytest

from gating.config import AuditConfig, GateConfig, SuiteConfig

pytestmark = [pytest.mark.integration]

CONFIG = GateConfig(suite=SuiteConfig(size=40, max_new_tokens=16),
                    audit=AuditConfig(every=3, margin=0.03))


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """The trained toy champion, an identical copy, and an untrained model (fails what the
    champion solves)."""
    import torch

    from policy.toy.checkpoint import load_checkpoint, save_checkpoint
    from policy.toy.model import MoETransformer
    from trainer.fixtures import champion_dir

    root = tmp_path_factory.mktemp("audit")
    same = shutil.copytree(champion_dir(), root / "same")
    torch.manual_seed(3)
    worse = MoETransformer(load_checkpoint(champion_dir()).config).eval()
    return {"anchor": champion_dir(), "same": same,
            "worse": save_checkpoint(worse, root / "worse")}


def _model(uri: str, checkpoints, order: list[str]) -> tuple[str, list[int]]:
    """A registered model whose versions are ``order``'s checkpoints; the first is champion."""
    import mlflow

    from runtime import registry

    name = f"audit-{uuid.uuid4().hex[:8]}"
    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment("audit-register")
    versions = []
    with mlflow.start_run():
        for i, key in enumerate(order):
            ref = registry.log_checkpoint(checkpoints[key], model_name=name,
                                          alias="champion" if i == 0 else None)
            versions.append(ref.version)
    return name, versions


def _promote(uri: str, name: str, champion: int, version: int) -> None:
    """What a cycle's deploy stage does for a promotion that stuck."""
    from gating.audit import note_anchor
    from runtime import registry

    registry.promote(uri, name, version, expected=champion)
    registry.set_version_tags(uri, name, version, {"gate.promoted": "true"})
    note_anchor(uri, name, champion)


def test_due_after_every_promotions_counting_only_those_that_stuck(mlflow_server, checkpoints):
    from gating.audit import audit_due
    from runtime import registry

    uri = mlflow_server.uri
    name, v = _model(uri, checkpoints, ["anchor", "same", "same", "same", "same"])
    assert audit_due(uri, name, 3) is None  # no promotion yet: no anchor
    _promote(uri, name, v[0], v[1])
    _promote(uri, name, v[1], v[2])
    assert audit_due(uri, name, 3) is None  # two promotions
    # a canary rolled v4 back: promoted, then untagged
    registry.promote(uri, name, v[3], expected=v[2])
    registry.set_version_tags(uri, name, v[3], {"gate.promoted": "false"})
    registry.promote(uri, name, v[2], expected=v[3])
    assert audit_due(uri, name, 3) is None
    _promote(uri, name, v[2], v[4])
    plan = audit_due(uri, name, 3)
    assert plan is not None
    assert (plan.champion, plan.anchor, plan.fallback, plan.promotions) == (v[4], v[0], v[0], 3)
    assert registry.model_tags(uri, name)["ratchet.audit.anchor"] == str(v[0])


def test_a_champion_that_lost_what_the_anchor_did_is_rolled_back(mlflow_server, checkpoints,
                                                                  tmp_path):
    from mlflow import MlflowClient

    from gating.audit import audit_due, run_audit
    from runtime import registry

    uri = mlflow_server.uri
    name, v = _model(uri, checkpoints, ["anchor", "same", "same", "worse"])
    for old, new in zip(v, v[1:]):
        _promote(uri, name, old, new)
    plan = audit_due(uri, name, 3)
    served: list[int] = []
    verdict = run_audit(tracking_uri=uri, model_name=name, plan=plan, config=CONFIG,
                        workdir=tmp_path, roll_back=served.append)
    assert not verdict.passed and "guard.target" in verdict.failed_gates
    assert verdict.decision.startswith(f"audit rolled back v{v[3]} to v{v[0]}")
    assert registry.resolve_alias(uri, name, "champion") == v[0] and served == [v[0]]
    tags = registry.version_tags(uri, name, v[3])
    assert tags["audit.verdict"] == "fail" and tags["gate.promoted"] == "false"
    run = MlflowClient(uri).get_run(verdict.run_id)
    assert run.info.run_name == f"audit-v{v[3]}" and run.data.tags["audit.verdict"] == "fail"
    assert run.data.metrics["audit.guard.target"] < -0.03
    assert audit_due(uri, name, 3) is None  # the audit moved its position: not due again


def test_a_champion_that_kept_what_the_anchor_did_becomes_the_fallback(mlflow_server,
                                                                       checkpoints, tmp_path):
    from gating.audit import audit_due, run_audit
    from runtime import registry

    uri = mlflow_server.uri
    name, v = _model(uri, checkpoints, ["anchor", "same", "same", "same"])
    for old, new in zip(v, v[1:]):
        _promote(uri, name, old, new)
    verdict = run_audit(tracking_uri=uri, model_name=name, plan=audit_due(uri, name, 3),
                        config=CONFIG, workdir=tmp_path, roll_back=pytest.fail)
    assert verdict.passed, verdict.decision
    assert verdict.decision.startswith(f"audit kept v{v[3]}: non-inferior to the anchor v{v[0]}")
    assert registry.resolve_alias(uri, name, "champion") == v[3]
    tags = registry.model_tags(uri, name)
    assert tags["ratchet.audit.passed"] == tags["ratchet.audit.at"] == str(v[3])


class Killed(BaseException):
    """Stands in for the process dying: nothing in the code under test catches it."""


def _die_when_untagging_promotion(monkeypatch):
    """Kill the audit right after ``champion`` moved back, at its first write of the tags that
    say so; returns the undo."""
    from runtime import registry

    real = registry.set_version_tags

    def dying(uri, name, version, tags, description=None):
        if tags.get("gate.promoted") == "false":
            raise Killed
        return real(uri, name, version, tags, description)

    monkeypatch.setattr(registry, "set_version_tags", dying)
    return lambda: monkeypatch.setattr(registry, "set_version_tags", real)


def _audit_runs(uri: str, name: str, version: int) -> list:
    """Every run that audited ``version`` of model ``name``, in any experiment."""
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    return client.search_runs(experiments, f"tags.`audit.model` = '{name}' and "
                                           f"attributes.run_name = 'audit-v{version}'")


def test_a_failed_audit_killed_after_the_alias_moved_is_settled_never_repromoted(
    mlflow_server, checkpoints, tmp_path, monkeypatch
):
    from gating.audit import audit_due, run_audit, settle_audit, unsettled_audit
    from runtime import registry

    uri = mlflow_server.uri
    name, v = _model(uri, checkpoints, ["anchor", "same", "same", "worse"])
    for old, new in zip(v, v[1:]):
        _promote(uri, name, old, new)
    revive = _die_when_untagging_promotion(monkeypatch)
    with pytest.raises(Killed):
        run_audit(tracking_uri=uri, model_name=name, plan=audit_due(uri, name, 3), config=CONFIG,
                  workdir=tmp_path)
    revive()
    assert registry.resolve_alias(uri, name, "champion") == v[0]
    assert registry.version_tags(uri, name, v[3])["gate.promoted"] == "true"  # not yet untagged
    with pytest.raises(registry.VersionFailedAudit, match=f"v{v[3]} failed the lifetime audit"):
        registry.promote(uri, name, v[3], expected=v[0])

    record = unsettled_audit(uri, name)
    assert record is not None and (record.champion, record.passed, record.fallback) == (
        v[3], False, v[0])
    served: list[int] = []
    settle_audit(uri, name, record, roll_back=served.append)
    assert registry.resolve_alias(uri, name, "champion") == v[0] and served == [v[0]]
    assert registry.version_tags(uri, name, v[3])["gate.promoted"] == "false"
    assert registry.model_tags(uri, name)["ratchet.audit.at"] == str(v[3])
    assert unsettled_audit(uri, name) is None and audit_due(uri, name, 3) is None
    assert len(_audit_runs(uri, name, v[3])) == 1


def test_a_deploy_stage_killed_inside_the_audit_rollback_does_not_promote_the_version_again(
    mlflow_server, checkpoints, tmp_path, monkeypatch
):
    """A cycle promotes v2 over v1, the audit (due after every promotion) fails it and moves
    ``champion`` back to v1, and the process dies before the tags are written. The resumed deploy
    stage's compare-and-set (champion is v1, as when v2 was gated) would hold: it must still not
    promote v2, nor audit it again."""
    from ratchet.config import RatchetConfig
    from ratchet.cycle import Cycle
    from ratchet.cycle_state import CycleState, CycleStore
    from runtime import registry

    uri = mlflow_server.uri
    name, (v1, v2) = _model(uri, checkpoints, ["anchor", "worse"])
    gate = CONFIG.model_copy(update={"audit": AuditConfig(every=1, margin=0.03)})
    config = RatchetConfig(model_name=name, experiment=f"{name}-cycles", gate=gate)
    store = CycleStore(tmp_path / "spans")
    store.save(CycleState(cycle_id="cycle-audit", stage="gated", seq=1, champion_version=v1,
                          candidate_version=v2, attempts=1,
                          verdict={"passed": True, "run_id": None, "failed": "none",
                                   "decision": "promote"}))

    def cycle() -> Cycle:
        return Cycle(config, tracking_uri=uri, bootstrap="127.0.0.1:9", workdir=tmp_path)

    revive = _die_when_untagging_promotion(monkeypatch)
    with pytest.raises(Killed):
        cycle().run(1)
    revive()
    assert registry.resolve_alias(uri, name, "champion") == v1

    champions: list[int] = []
    real_promote = registry.promote

    def promote(uri_, name_, version, **kw):
        champions.append(version)
        return real_promote(uri_, name_, version, **kw)

    monkeypatch.setattr(registry, "promote", promote)
    result = cycle().run(2)
    assert v2 not in champions
    assert registry.resolve_alias(uri, name, "champion") == v1
    assert result.promoted and result.audit.startswith(f"audit rolled back v{v2} to v{v1}")
    (state,) = store.all()
    assert state.stage == "deployed" and state.verdict["audit"]["rolled_back_to"] == v1
    tags = registry.version_tags(uri, name, v2)
    assert tags["audit.verdict"] == "fail" and tags["gate.promoted"] == "false"
    assert registry.model_tags(uri, name)["ratchet.audit.at"] == str(v2)
    failed = [r for r in _audit_runs(uri, name, v2) if r.data.tags.get("audit.verdict") == "fail"]
    assert len(failed) == 1

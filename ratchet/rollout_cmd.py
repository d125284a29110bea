"""`ratchet rollout VERSION`: one canary rollout of a given version by hand.

Under the model's lease: ``champion`` moves to VERSION (compare-and-set against the champion read
at start, the old one becomes ``previous-champion``), then deploy/fleet/canary.py rolls it out on
the
configured fleet (``fleet.router_url`` / ``--router``) while ingest writes the delayed product
signals into ``<workdir>/spans``. A rollback restores both aliases. The verdict goes onto the
model version (tags + description) and into an MLflow run ``rollout-vN`` of the cycle experiment.

Deliberately left out: training and gating (a version is rolled out as given), starting a fleet.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path

from ratchet.config import RatchetConfig

log = logging.getLogger(__name__)


def run_rollout(
    config: RatchetConfig, version: int, *, tracking_uri: str, bootstrap: str, workdir: Path
) -> str:
    """Roll ``version`` out; returns the controller's final state (``promoted``/``rolled_back``)."""
    import mlflow

    from deploy.fleet.canary import RouterTarget, run_canary, step_figures
    from ingest.pipeline import run_span
    from runtime import registry
    from runtime.lease import ModelLease

    if not config.fleet.router_url:
        raise SystemExit("ratchet rollout needs a fleet: set fleet.router_url or pass --router")
    name, lock = config.model_name, config.lock
    spans = workdir / "spans"
    with ModelLease(tracking_uri, name, ttl_s=lock.ttl_s, wait_s=lock.wait_s,
                    settle_s=lock.settle_s) as lease:
        stable = registry.resolve_alias(tracking_uri, name, registry.CHAMPION)
        if stable is None or stable == version:
            raise SystemExit(f"{name}: champion is v{stable}; nothing to roll out against")
        previous = registry.resolve_alias(tracking_uri, name, registry.PREVIOUS_CHAMPION)
        lease.check()
        registry.promote(tracking_uri, name, version, expected=stable)
        registry.use_experiment(tracking_uri, config.experiment)
        with mlflow.start_run(run_name=f"rollout-v{version}"):
            mlflow.set_tags({"ratchet.stage": "rollout", "ratchet.model": name})
            ctl = run_canary(
                RouterTarget(config.fleet.router_url, config.fleet.admin_token),
                config=config.rollout, tracking_uri=tracking_uri, model_name=name,
                stable_version=stable, canary_version=version, previous_version=previous,
                spans_root=spans, horizon_s=config.ingest.join.horizon_s(),
                ingest_step=lambda: run_span(bootstrap=bootstrap,
                                             group_id=config.ingest.group_id,
                                             output_root=spans, config=config.ingest),
                timeout_s=config.fleet.rollout_timeout_s, guard=lease.check,
            )
            result = ctl.result()
            for i, row in enumerate(step_figures(result)):
                mlflow.log_metrics({f"canary.{k}": v for k, v in row.items()}, step=i)
            mlflow.log_dict([asdict(r) for r in result.steps], "canary/step_log.json")
            mlflow.set_tag("canary.verdict", result.state)
    for r in result.steps:
        print(f"step {r.step} weight {r.weight:.2f}: {r.decision} {r.reason}")
    print(f"rollout of v{version} vs v{stable}: {result.state}; champion is now "
          f"v{registry.resolve_alias(tracking_uri, name, registry.CHAMPION)}")
    return result.state

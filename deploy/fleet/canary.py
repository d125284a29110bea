"""One canary rollout on a running fleet reached through its router (address + admin token).

``run_canary`` is what a cycle's deploy stage (and ``ratchet rollout``) does after ``champion``
moved to the candidate: it reads the router's replica groups, reloads the canary group to the
candidate, and drives a :class:`deploy.fleet.rollout.RolloutController` (weight steps, statistical
judge,
automatic rollback) while ``ingest_step`` keeps the delayed product signals flowing into the spans
that :class:`deploy.fleet.rollout.RewardSpans` reads. Promoted: the stable group is reloaded to the
candidate and the weight goes back to 0 (the stable group serves the new champion). Rolled back:
weight 0, aliases restored by the controller; the canary group keeps the candidate loaded, unused.
A rollout that runs past ``timeout_s`` is rolled back ("undecided").

Deliberately left out: starting replicas or the router (deploy/fleet/fleet.py), traffic
(simulation/simulator.py), where the verdict is recorded besides the model version
(ratchet/cycle.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from deploy.fleet.rollout import RewardSpans, RolloutConfig, RolloutController, RolloutResult

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RouterTarget:
    """The fleet a cycle reaches: its router's address and the admin token of router+replicas."""

    url: str
    admin_token: str

    def client(self):
        from deploy.fleet.router import RouterClient

        return RouterClient(self.url, self.admin_token)


def reload_replicas(urls: list[str], version: int, token: str, *, timeout_s: float = 180.0) -> None:
    """``POST /admin/reload`` each replica in turn and wait until its /readyz serves ``version``."""
    headers = {"Authorization": f"Bearer {token}"}
    for url in urls:
        httpx.post(f"{url}/admin/reload", json={"version": version}, headers=headers,
                   timeout=timeout_s).raise_for_status()
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                resp = httpx.get(f"{url}/readyz", timeout=5)
                if resp.status_code == 200 and resp.json().get("version") == version:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"replica {url} does not serve v{version} after {timeout_s}s")
            time.sleep(0.2)
        log.info("replica %s now serves v%d", url, version)


def run_canary(
    target: RouterTarget,
    *,
    config: RolloutConfig,
    tracking_uri: str,
    model_name: str,
    stable_version: int,
    canary_version: int,
    previous_version: int | None,
    spans_root: Path,
    horizon_s: float,
    ingest_step: Callable[[], object],
    timeout_s: float,
    guard: Callable[[], None] | None = None,
    poll_s: float = 0.5,
) -> RolloutController:
    """Roll ``canary_version`` out against ``stable_version``; returns the finished controller."""
    client = target.client()
    groups = client.groups()
    if not groups["canary"]:
        raise RuntimeError(f"router {target.url} has no canary replicas: a rollout needs a canary "
                           "group (PUT /admin/groups)")
    client.set_canary_weight(0.0)
    reload_replicas(groups["canary"], canary_version, target.admin_token)
    ctl = RolloutController(
        config=config, splitter=client, serving=client,
        product=RewardSpans(spans_root, model_name=model_name, horizon_s=horizon_s),
        tracking_uri=tracking_uri, model_name=model_name, stable_version=stable_version,
        canary_version=canary_version, previous_version=previous_version, guard=guard,
    )
    ctl.start()
    deadline = time.monotonic() + timeout_s
    while ctl.state == "running":
        if time.monotonic() > deadline:
            ctl.abort(f"undecided: rollout ran past its {timeout_s:.0f} s limit")
            break
        ingest_step()
        if ctl.tick() is None:
            time.sleep(poll_s)
    if ctl.state == "promoted":
        reload_replicas(groups["stable"], canary_version, target.admin_token)
        client.set_canary_weight(0.0)
    return ctl


def step_figures(result: RolloutResult) -> list[dict[str, float]]:
    """Per judged step: weight, sample counts and each metric's arms and p-value (for MLflow)."""
    out = []
    for r in result.steps:
        row: dict[str, float] = {"weight": r.weight, "extensions": float(r.extensions)}
        for arm, counts in r.samples.items():
            row.update({f"{arm}_{k}": float(v) for k, v in counts.items()})
        for m in r.metrics:
            for key in ("stable", "canary", "p_value"):
                if m[key] is not None:
                    row[f"{m['name']}_{key}"] = float(m[key])
        out.append(row)
    return out

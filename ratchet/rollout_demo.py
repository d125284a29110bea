"""One progressive rollout, end to end on this machine, printing its step log.

    python -m ratchet.rollout_demo --canary untrained --workdir runs/rollout-demo

Starts the embedded broker and MLflow, registers the warm-started champion (ratchet.bootstrap,
cached) as the stable version and a canary (``untrained``: a worse model; ``same``: the same
weights registered again), moves ``champion`` to the canary as a passing gate would, and starts a
stable and a canary replica behind the router. Simulated users send traffic through the router
the whole time (signals in compressed event time); every few seconds ingest (Beam) writes a span
and the rollout controller ticks. The controller waits for each window to close in event time
(join windows of 600 s, no extra lateness: the watermark is the newest signal's event time),
judges, and either advances, extends, or rolls back. Writes ``step_log.json`` to the workdir.

Deliberately left out: training (the canary is given), and anything a test needs (this is a demo).
"""

from __future__ import annotations

import argparse
import json
import logging
import threading
import time
import uuid
from dataclasses import asdict
from pathlib import Path


class Traffic:
    """Simulated users sending rounds through the router until stopped."""

    def __init__(self, sim, round_size: int, concurrency: int) -> None:
        self.sim, self.round_size, self.concurrency = sim, round_size, concurrency
        self.stop = threading.Event()
        self.rounds = 0
        self.thread = threading.Thread(target=self._run, name="traffic", daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            self.sim.run_round(self.round_size, concurrency=self.concurrency)
            self.rounds += 1


def _register(args, ep, workdir: Path) -> tuple[str, int, int]:
    from deploy.replica.toy_models import register_untrained
    from ratchet.bootstrap import ensure_champion
    from ratchet.config import RatchetConfig
    from runtime import registry

    config = RatchetConfig(model_name=f"rollout-demo-{uuid.uuid4().hex[:4]}")
    if args.stable_checkpoint is not None:
        stable = _log(ep.tracking_uri, config.model_name, Path(args.stable_checkpoint), "stable")
    else:
        stable = ensure_champion(config, tracking_uri=ep.tracking_uri, workdir=workdir)
    if args.canary == "untrained":
        canary = register_untrained(ep.tracking_uri, config.model_name, seed=7, workdir=workdir)
    else:
        canary = _reregister(ep.tracking_uri, config.model_name, stable, workdir)
    registry.promote(ep.tracking_uri, config.model_name, canary)  # what a passing gate does
    return config.model_name, stable, canary


def _reregister(tracking_uri: str, name: str, version: int, workdir: Path) -> int:
    from runtime import registry

    directory = registry.download_checkpoint(tracking_uri, name, version, workdir / "dl")
    return _log(tracking_uri, name, directory, "same-weights-canary")


def _log(tracking_uri: str, name: str, directory: Path, run_name: str) -> int:
    import mlflow

    from runtime import registry

    mlflow.set_tracking_uri(tracking_uri)
    with mlflow.start_run(run_name=run_name):
        return registry.log_checkpoint(directory, model_name=name).version


def _ingest_config():
    from ingest.config import IngestConfig, JoinConfig, ParseConfig, ValidationConfig
    from simulation.simulator import SIMULATED_SKEW_S

    return IngestConfig(
        parse=ParseConfig(max_future_skew_s=SIMULATED_SKEW_S),  # the simulator compresses time
        join=JoinConfig(followup_window_s=600.0, feedback_window_s=600.0, allowed_lateness_s=0.0),
        validation=ValidationConfig(
            max_reward_mean_drift=10.0, max_reward_std_drift=10.0, max_length_drift_ratio=100.0
        ),
    )


def run(args: argparse.Namespace) -> list[dict]:
    from deploy.fleet.fleet import Fleet, RouterProcess
    from deploy.fleet.judge import JudgeConfig
    from deploy.fleet.rollout import RewardSpans, RolloutConfig, RolloutController
    from ingest.pipeline import run_span
    from ratchet.runner import services
    from simulation.simulator import SIMULATED_SKEW_S, UserSimulator

    workdir = Path(args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    token = f"demo-{uuid.uuid4().hex}"
    with services(workdir, bootstrap=None, tracking_uri=None) as ep:
        name, stable_v, canary_v = _register(args, ep, workdir)
        common = dict(
            n_replicas=1,
            tracking_uri=ep.tracking_uri,
            model_name=name,
            bootstrap=ep.bootstrap,
            admin_token=token,
            api_keys_path=workdir / "api_keys.json",
            signal_max_skew_s=SIMULATED_SKEW_S,  # the simulator dates signals in compressed time
            behind_router=True,
        )
        with (
            Fleet.start(
                **common, version=stable_v, workdir=workdir / "stable", name="stable"
            ) as stable,
            Fleet.start(
                **common, version=canary_v, workdir=workdir / "canary", name="canary"
            ) as canary,
            RouterProcess.start(
                stable_urls=stable.urls,
                canary_urls=canary.urls,
                admin_token=token,
                workdir=workdir / "router",
            ) as router,
        ):
            sim = UserSimulator(
                urls=[router.url], api_key=stable.create_api_key("rollout-demo"), speed=600.0,
                seed=args.seed,
            )
            traffic = Traffic(sim, round_size=8, concurrency=4)
            config = RolloutConfig(
                window_s=args.window_s,
                max_extensions=args.max_extensions,
                judge=JudgeConfig(min_requests=args.min_requests, min_signals=args.min_signals),
            )
            spans = workdir / "spans"
            ctl = RolloutController(
                config=config,
                splitter=router.client(),
                serving=router.client(),
                product=RewardSpans(spans, model_name=name, horizon_s=600.0),
                tracking_uri=ep.tracking_uri,
                model_name=name,
                stable_version=stable_v,
                canary_version=canary_v,
            )
            ctl.start()
            traffic.thread.start()
            group, ingest_config, t0 = f"rollout-{uuid.uuid4().hex[:6]}", _ingest_config(), 0.0
            try:
                t0 = time.monotonic()
                while ctl.state == "running" and time.monotonic() - t0 < args.timeout_s:
                    run_span(
                        bootstrap=ep.bootstrap,
                        group_id=group,
                        output_root=spans,
                        config=ingest_config,
                    )
                    record = ctl.tick()
                    if record is not None:
                        print(_line(record), flush=True)
            finally:
                traffic.stop.set()
                traffic.thread.join()
                sim.close()
        log = [asdict(r) for r in ctl.log]
        (workdir / "step_log.json").write_text(json.dumps(log, indent=2, default=str))
        print(
            f"\nrollout of v{canary_v} vs v{stable_v}: {ctl.state}, final weight "
            f"{ctl.weight:.2f}, {time.monotonic() - t0:.0f} s; champion alias now "
            f"v{_champion(ep.tracking_uri, name)}; step log: {workdir / 'step_log.json'}"
        )
    return log


def _champion(tracking_uri: str, name: str) -> int | None:
    from runtime import registry

    return registry.resolve_alias(tracking_uri, name, registry.CHAMPION)


def _line(record) -> str:
    stats = ", ".join(
        f"{m['name']} {_fmt(m['stable'])}/{_fmt(m['canary'])} p={_fmt(m['p_value'])} "
        f"{m['decision']}"
        for m in record.metrics
    )
    s, c = record.samples.get("stable", {}), record.samples.get("canary", {})
    return (
        f"step {record.step} w={record.weight:.2f} ext={record.extensions} "
        f"n(stable/canary)={s.get('requests')}/{c.get('requests')} req, "
        f"{s.get('finalised')}/{c.get('finalised')} rows -> {record.decision.upper()}"
        f"{' (' + record.reason + ')' if record.reason else ''}\n    {stats}"
    )


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.3g}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--canary", choices=("untrained", "same"), default="untrained")
    parser.add_argument("--workdir", default="runs/rollout-demo")
    parser.add_argument(
        "--stable-checkpoint",
        default=None,
        help="Checkpoint dir to register as the stable version (default: the cached warm start).",
    )
    parser.add_argument("--window-s", type=float, default=30.0, help="Event seconds per step.")
    parser.add_argument("--max-extensions", type=int, default=4)
    parser.add_argument("--min-requests", type=int, default=40)
    parser.add_argument("--min-signals", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout-s", type=float, default=900.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("deploy.fleet.rollout").setLevel(logging.INFO)
    run(args)


if __name__ == "__main__":
    main()

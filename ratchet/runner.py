"""`ratchet cycle`, `ratchet loop` and `ratchet replay`: connect to (or start) the services, then
run cycles.

Without `--bootstrap` / `--tracking-uri` the embedded broker and a local MLflow server are started
under the workdir and stopped by PID at the end; with them, ratchet talks to an existing cluster.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from ratchet.config import RatchetConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Endpoints:
    bootstrap: str
    tracking_uri: str


@contextmanager
def services(
    workdir: Path, *, bootstrap: str | None, tracking_uri: str | None
) -> Iterator[Endpoints]:
    """Use the given endpoints, starting a local broker / MLflow server for the missing ones."""
    from runtime.services import Broker, MlflowServer

    with ExitStack() as stack:
        if bootstrap is None:
            broker = Broker.start(workdir / "broker")
            stack.callback(broker.stop)
            bootstrap = broker.bootstrap
        if tracking_uri is None:
            server = MlflowServer.start(workdir / "mlflow")
            stack.callback(server.stop)
            tracking_uri = server.uri
        from ingest.kafka_io import ensure_topics

        ensure_topics(bootstrap)
        yield Endpoints(bootstrap=bootstrap, tracking_uri=tracking_uri)


LOCKED_EXIT = 75
"""Exit status of `ratchet cycle` when another cycle holds the model's lease (EX_TEMPFAIL)."""


def run_command(args: argparse.Namespace, config: RatchetConfig) -> int:
    from runtime.lease import LeaseHeld, LeaseLost

    try:
        return _run_command(args, config)
    except LeaseHeld as e:
        print(f"ratchet {args.command}: {e}", file=sys.stderr)
        return LOCKED_EXIT
    except LeaseLost as e:  # stalled past the lease: another cycle owns the model now
        print(f"ratchet {args.command}: stopped without writing: {e}", file=sys.stderr)
        return LOCKED_EXIT


def _run_command(args: argparse.Namespace, config: RatchetConfig) -> int:
    from ratchet.cycle import Cycle

    workdir: Path = args.workdir
    workdir.mkdir(parents=True, exist_ok=True)
    with services(workdir, bootstrap=args.bootstrap, tracking_uri=args.tracking_uri) as ep:
        # The cycle bootstraps the champion itself, under the model's lease (no two champions).
        if args.command == "replay" and args.drain:
            # A finished recording: finalise every completion it holds, open windows included,
            # instead of waiting for traffic that will never arrive.
            from ratchet.replay import finished_recording

            config = finished_recording(config)
        cycle = Cycle(config, tracking_uri=ep.tracking_uri, bootstrap=ep.bootstrap, workdir=workdir)
        if args.command == "cycle":
            return report(cycle.run(0))
        if args.command == "replay":
            from ratchet.replay import replay

            sent = replay(args.file, bootstrap=ep.bootstrap, speed=args.speed)
            log.info("replayed %d records from %s", sent, args.file)
            return report(cycle.run(0))
        if args.command == "loop":
            from ratchet.scheduler import run_every

            run_every(args.every_s, lambda i: report(cycle.run(i)), max_cycles=args.max_cycles)
    return 0


def describe(result) -> str:
    """A cycle's outcome in a few readable lines."""
    head = f"cycle {result.index}: "
    if result.skipped:
        return head + f"skipped — {result.skipped} (span rows {result.span_rows}, " \
                      f"dead letters {result.dead_letters}; MLflow run {result.run_id})"
    verdict = "promoted" if result.promoted else ("passed, not promoted" if result.gate_passed
                                                  else "rejected by the gate")
    lines = [head + f"candidate v{result.candidate_version} vs champion "
                    f"v{result.champion_version}: {verdict}",
             f"  span rows {result.span_rows}, dead letters {result.dead_letters}",
             f"  gate pass rate: candidate {_fmt(result.candidate_pass_rate)}, "
             f"champion {_fmt(result.champion_pass_rate)}",
             "  seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in result.seconds.items()),
             f"  MLflow run {result.run_id}"]
    if getattr(result, "audit", None):
        lines.insert(3, f"  {result.audit}")
    return "\n".join(lines)


def report(result) -> int:
    """Print the outcome; a cycle skipped for an error (not for too little or untrainable
    traffic) fails."""
    print(describe(result), flush=True)
    return 1 if failed(result) else 0


def failed(result) -> bool:
    """Skipped for an error; too little traffic or nothing trainable in it is not one."""
    return bool(result.skipped) and not any(
        reason in result.skipped for reason in ("min_rows_to_train", "no trainable rows"))


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"

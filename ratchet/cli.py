"""The `ratchet` command: thin entry points that parse arguments and call one `run` each.

Heavy modules (torch, mlflow, Beam, Ray, DeepSpeed) are imported only after the arguments are
parsed, so `ratchet --help` is instant.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import time
from pathlib import Path


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", type=Path, help="JSON config file (defaults: the toy setup)")
    p.add_argument("--workdir", type=Path, default=Path(".demo"), help="state, spans, logs")


def _connected(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("--bootstrap", help="Kafka bootstrap (default: start the embedded broker)")
    p.add_argument("--tracking-uri", help="MLflow server (default: start a local one)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ratchet", description="A production-feedback RL loop for a code model."
    )
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser(
        "demo", help="embedded broker + MLflow, toy champion, fleet, simulator, cycles"
    )
    _common(p)
    p.add_argument("--cycles", type=int, default=3)
    p.add_argument("--keep-running", action="store_true", help="keep MLflow up after the cycles")

    p = sub.add_parser("cycle", help="run ingest → train → gate → deploy once")
    _connected(p)

    p = sub.add_parser("loop", help="run a cycle every --every (e.g. 5h)")
    _connected(p)
    p.add_argument("--every", default="5h")
    p.add_argument("--max-cycles", type=int)

    p = sub.add_parser("replay", help="push recorded events into Kafka and run a cycle on them")
    _connected(p)
    p.add_argument("file", type=Path, help="JSONL of recorded events")
    p.add_argument("--speed", type=float, default=0.0, help="time compression; 0 = no waiting")

    p = sub.add_parser(
        "serve", help="serve the champion (one replica) with its API key; Ctrl-C stops it all"
    )
    _connected(p)
    p.add_argument("--port", type=int, help="replica port on 127.0.0.1 (default: a free one)")

    p = sub.add_parser("gates", help="gate verdicts")
    gsub = p.add_subparsers(dest="gates_command", required=True)
    show = gsub.add_parser("show", help="print the gate table of a model version")
    show.add_argument("version", type=int)
    show.add_argument("--tracking-uri", required=True)
    show.add_argument("--config", type=Path)

    p = sub.add_parser("ui", help="serve the MLflow UI over a demo workdir's store")
    p.add_argument("--workdir", type=Path, default=Path(".demo"))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # SIGTERM unwinds like Ctrl-C, so the services this process started are stopped by PID.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for noisy in ("kafka", "urllib3", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    from ratchet.config import load_config

    config = load_config(getattr(args, "config", None))
    if args.command == "demo":
        from ratchet.demo import run

        return run(config, workdir=args.workdir, cycles=args.cycles, keep_running=args.keep_running)
    if args.command == "serve":
        from ratchet.serve import run as serve

        return serve(
            config, workdir=args.workdir, port=args.port, bootstrap=args.bootstrap,
            tracking_uri=args.tracking_uri,
        )
    if args.command == "gates":
        from gating.show import format_gate_table

        print(format_gate_table(args.tracking_uri, config.model_name, args.version))
        return 0
    if args.command == "ui":
        from runtime.services import MlflowServer

        server = MlflowServer.start(args.workdir / "mlflow")
        print(f"MLflow UI: {server.uri}  (Ctrl-C to stop)", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
        finally:
            server.stop()
        return 0
    from ratchet.runner import run_command

    return run_command(args, config)


if __name__ == "__main__":
    sys.exit(main())

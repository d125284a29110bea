"""The `ratchet` command: thin entry points that parse arguments and call one `run` each.

Every input a command reads (the config file, a replay recording, ``--every``) is checked before
any service starts or any model is built; a bad one is refused with one line naming it and exit
code 2. Heavy modules (torch, mlflow, Beam, Ray, DeepSpeed) are imported only after that, so
`ratchet --help` and the refusals are instant.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

EXIT_USAGE = 2
"""Bad input, refused before anything started."""
EXIT_FAILED = 1
"""The command ran and did not succeed (a cycle skipped for an error, an unreachable server)."""


class UsageError(ValueError):
    """Refused input: the message is one line naming the input."""


DEMO_WORKDIR = Path(".demo")
"""The demo's own folder: `ratchet demo` wipes it at start."""
WORKDIR = Path(".ratchet")
"""Every other command's default folder (state, spans, logs): never the demo's."""


def _common(p: argparse.ArgumentParser, workdir: Path = WORKDIR) -> None:
    p.add_argument("--config", type=Path, help="JSON config file (defaults: the toy setup)")
    p.add_argument("--workdir", type=Path, default=workdir,
                   help=f"state, spans, logs (default {workdir})")


def _connected(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("--bootstrap", help="Kafka bootstrap (default: start the embedded broker)")
    p.add_argument("--tracking-uri", help="MLflow server (default: start a local one)")
    p.add_argument("--router", help="router of the fleet to roll out on (config fleet.router_url)")
    p.add_argument("--admin-token", help="admin token of that router and its replicas")


def _with_fleet(args: argparse.Namespace, config):
    """``--router`` / ``--admin-token`` override the config's fleet section."""
    update = {k: v for k, v in (("router_url", getattr(args, "router", None)),
                                ("admin_token", getattr(args, "admin_token", None))) if v}
    return config.model_copy(update={"fleet": config.fleet.model_copy(update=update)})


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ratchet", description="A production-feedback RL loop for a code model."
    )
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="library logs on the terminal too (they always go to the log file)")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser(
        "demo", help="embedded broker + MLflow, toy champion, fleet, simulator, cycles"
    )
    _common(p, DEMO_WORKDIR)
    p.add_argument("--cycles", type=int, default=3)
    p.add_argument("--keep-running", action="store_true", help="keep MLflow up after the cycles")

    p = sub.add_parser("cycle", help="run ingest → train → gate → deploy once")
    _connected(p)

    p = sub.add_parser("loop", help="run a cycle every --every (e.g. 5h)")
    _connected(p)
    p.add_argument("--every", default="5h", help="period, e.g. 5h, 30m, 1h30m (at least 60 s)")
    p.add_argument("--max-cycles", type=int)

    p = sub.add_parser("replay", help="push recorded events into Kafka and run a cycle on them")
    _connected(p)
    p.add_argument("file", type=Path, help="JSONL of recorded events")
    p.add_argument("--speed", type=float, default=0.0, help="time compression; 0 = no waiting")
    p.add_argument("--no-drain", dest="drain", action="store_false",
                   help="leave completions whose join windows are still open pending (default: "
                        "a finished recording is finalised, each completion written once; a "
                        "persistence window still open ends as ingest.join.open_at_drain says, "
                        "'neutral' unless the config sets it)")

    p = sub.add_parser(
        "serve", help="serve the champion (one replica) with its API key; Ctrl-C stops it all"
    )
    _connected(p)
    p.add_argument("--port", type=int, help="replica port on 127.0.0.1 (default: a free one)")

    p = sub.add_parser("rollout", help="canary rollout of one version on the configured fleet")
    _connected(p)
    p.add_argument("version", type=int, help="registered model version to roll out")

    p = sub.add_parser("gates", help="gate verdicts")
    gsub = p.add_subparsers(dest="gates_command", required=True)
    show = gsub.add_parser("show", help="print the gate table of a model version")
    show.add_argument("version", type=int)
    where = show.add_mutually_exclusive_group(required=True)
    where.add_argument("--tracking-uri", help="an MLflow tracking server")
    where.add_argument("--workdir", type=Path, help="a local store (e.g. .demo), no server needed")
    show.add_argument("--config", type=Path)
    cmp = gsub.add_parser(
        "compare", help="compare version B (candidate) with version A (baseline) on your own "
        "JSONL suite, with the gate's statistics (nothing recorded, nothing promoted)")
    cmp.add_argument("version_a", type=int, help="baseline version (e.g. the old champion)")
    cmp.add_argument("version_b", type=int, help="candidate version")
    cmp.add_argument("--suite", type=Path, required=True,
                     help="a JSONL suite (docs/GATE.md); every task runs on both versions")
    where = cmp.add_mutually_exclusive_group(required=True)
    where.add_argument("--tracking-uri", help="an MLflow tracking server")
    where.add_argument("--workdir", type=Path, help="a local store (e.g. .demo): its MLflow "
                       "server is started for the comparison and stopped after")
    cmp.add_argument("--config", type=Path)

    p = sub.add_parser("spans", help="ingested spans: list, show one, release a quarantined one")
    ssub = p.add_subparsers(dest="spans_command", required=True)
    for name, text in (("list", "print each span's id, status and rows"),
                       ("show", "rows, signal coverage and the reward distribution of a span"),
                       ("release", "re-admit a quarantined span after review")):
        q = ssub.add_parser(name, help=text)
        q.add_argument("--workdir", type=Path, default=WORKDIR)
        if name in ("show", "release"):
            q.add_argument("span_id", help="e.g. span-000003")
        if name == "release":
            q.add_argument("--note", default="", help="why it was released (kept in the manifest)")

    p = sub.add_parser("impact", help="what the promotions did for users: the champion against "
                       "the holdback on the reward spans (the latest cycle's versions)")
    p.add_argument("--workdir", type=Path, default=WORKDIR, help=f"default {WORKDIR}")
    p.add_argument("--champion", type=int, help="compare this version (default: the latest "
                   "cycle's champion)")
    p.add_argument("--anchor", type=int, help="against this holdback version (default: the "
                   "latest cycle's anchor)")

    p = sub.add_parser("anchor", help="move the holdback's anchor to a version (recorded on the "
                       "registered model; the holdback replicas of fleet.router_url reload)")
    p.add_argument("version", type=int, help="registered model version to anchor on")
    p.add_argument("--reason", required=True, help="why (kept in the model's anchor history)")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--tracking-uri", help="an MLflow tracking server")
    where.add_argument("--workdir", type=Path, help="a local store (e.g. .demo)")
    p.add_argument("--config", type=Path)

    p = sub.add_parser("config", help="the resolved configuration")
    csub = p.add_subparsers(dest="config_command", required=True)
    show = csub.add_parser("show", help="print the resolved config as JSON")
    show.add_argument("--config", type=Path)

    p = sub.add_parser("ui", help="serve the MLflow UI over a workdir's store")
    p.add_argument("--workdir", type=Path, default=WORKDIR, help=f"default {WORKDIR}")
    return parser


def check_inputs(args: argparse.Namespace):
    """Everything a command reads, checked up front. Returns the config; raises UsageError."""
    from ratchet.config import ConfigError, load_config
    from ratchet.replay import RecordingError, load_recording
    from ratchet.scheduler import parse_period

    # reading a recorded decision needs the model's name, not its weights
    reads_records = args.command == "gates" and args.gates_command == "show"
    try:
        config = _with_fleet(args, load_config(getattr(args, "config", None),
                                               check_paths=not reads_records))
        if args.command == "replay":
            load_recording(args.file)
        if args.command == "loop":
            args.every_s = parse_period(args.every)
            if args.max_cycles is not None and args.max_cycles < 1:
                raise UsageError(f"--max-cycles {args.max_cycles}: must be at least 1")
        if args.command == "demo" and args.cycles < 1:
            raise UsageError(f"--cycles {args.cycles}: must be at least 1")
        if args.command == "gates" and args.gates_command == "compare":
            _check_suite(args.suite)
    except (ConfigError, RecordingError, ValueError) as e:
        raise UsageError(str(e)) from None
    return config


def _check_suite(path: Path) -> None:
    """A ``--suite`` file that exists and parses (the line and field of a bad task named)."""
    from gating.config import SuiteConfig
    from gating.suite import build_suite

    if not path.is_file():
        raise UsageError(f"--suite {path}: no such file")
    try:
        tasks, _ = build_suite(SuiteConfig(kind="jsonl", path=str(path), size=10_000))
    except (OSError, KeyError, TypeError) as e:
        raise UsageError(f"--suite {path}: {e}") from None
    if not tasks:
        raise UsageError(f"--suite {path}: holds no task")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "spans":  # file edits only: no services, no signal handler
        return _spans(args)
    if args.command == "impact":  # reads files only, and fast: pyarrow, no MLflow
        return _impact(args)
    # SIGTERM unwinds like Ctrl-C, so the services this process started are stopped by PID.
    from runtime.services import unwind_on_sigterm

    unwind_on_sigterm()
    try:
        config = check_inputs(args)
    except UsageError as e:
        print(f"ratchet: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    from ratchet import console

    workdir = getattr(args, "workdir", None)
    log_file = workdir / "ratchet.log" if workdir and args.command in _LOGGED else None
    if args.command == "demo":
        from ratchet.demo import WorkdirError, prepare_workdir

        try:
            prepare_workdir(args.workdir)
        except WorkdirError as e:
            print(f"ratchet: error: {e}", file=sys.stderr)
            return EXIT_USAGE
    console.setup(log_file, verbose=args.verbose)
    if log_file is not None and args.command != "demo":  # the demo's last line names it
        print(f"ratchet: full log in {log_file}", file=sys.stderr, flush=True)
    return _dispatch(args, config)


_LOGGED = {"demo", "cycle", "loop", "replay", "serve", "rollout"}
_CYCLES = {"demo", "cycle", "loop", "replay"}
"""Commands that train and gate in this process (``config.torch_threads`` applies)."""


def _dispatch(args: argparse.Namespace, config) -> int:
    if args.command in _CYCLES:
        import torch

        torch.set_num_threads(config.torch_threads)
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
        if args.gates_command == "compare":
            return _gates_compare(args, config)
        return _gates_show(args, config)
    if args.command == "config":
        print(json.dumps(json.loads(config.model_dump_json()), indent=2))
        return 0
    if args.command == "ui":
        return _ui(args.workdir)
    if args.command == "rollout":
        return _rollout(args, config)
    if args.command == "anchor":
        return _anchor(args, config)
    from ratchet.runner import run_command

    return run_command(args, config)


def _rollout(args: argparse.Namespace, config) -> int:
    from ratchet.rollout_cmd import run_rollout
    from ratchet.runner import services

    with services(args.workdir, bootstrap=args.bootstrap, tracking_uri=args.tracking_uri) as ep:
        state = run_rollout(config, args.version, tracking_uri=ep.tracking_uri,
                            bootstrap=ep.bootstrap, workdir=args.workdir)
    return 0 if state == "promoted" else 1


def _lookup_failed(e: Exception) -> int:
    """Print a failed lookup; its exit code: 2 for the operator's mistake (no such version, a
    workdir with no store), 1 for anything else (an unreachable server, a bad record)."""
    from gating.show import NoStore, VersionNotFound

    print(f"ratchet: error: {e}", file=sys.stderr)
    return EXIT_USAGE if isinstance(e, VersionNotFound | NoStore) else EXIT_FAILED


def _gates_show(args: argparse.Namespace, config) -> int:
    from gating.show import GateLookupError, format_gate_table, local_store

    try:
        uri, artifacts = (args.tracking_uri, None) if args.workdir is None else local_store(
            args.workdir)
        print(format_gate_table(uri, config.model_name, args.version, artifacts))
    except GateLookupError as e:
        return _lookup_failed(e)
    return 0


def _gates_compare(args: argparse.Namespace, config) -> int:
    from gating.compare import compare_versions
    from gating.report import format_table
    from gating.show import GateLookupError, check_reachable, local_store

    server = None
    try:
        if args.workdir is not None:
            from runtime.services import MlflowServer

            local_store(args.workdir)  # a clear error when there is no store
            server = MlflowServer.start(args.workdir / "mlflow")
            uri, scratch = server.uri, args.workdir / "compare"
        else:
            check_reachable(args.tracking_uri)
            uri, scratch = args.tracking_uri, Path(tempfile.mkdtemp(prefix="ratchet-compare-"))
        verdict = compare_versions(
            tracking_uri=uri, model_name=config.model_name, baseline=args.version_a,
            candidate=args.version_b, suite_path=args.suite, config=config.gate,
            workdir=scratch)
    except (GateLookupError, ValueError, FileNotFoundError) as e:
        return _lookup_failed(e)
    finally:
        if server is not None:
            server.stop()
    b, a = f"v{args.version_b} (B)", f"v{args.version_a} (A)"
    print(format_table(verdict, sides=(b, a), title=f"{config.model_name}: {b} against {a} on "
                       f"{args.suite}; nothing recorded, no alias moved"))
    return 0


def _impact(args: argparse.Namespace) -> int:
    from deploy.fleet.impact import format_impact, impact_from_spans, latest_impact

    last = latest_impact(args.workdir / "impact")
    if last is None:
        print(f"ratchet: error: no impact table in {args.workdir / 'impact'} (a cycle writes one)",
              file=sys.stderr)
        return EXIT_USAGE
    table = impact_from_spans(
        args.workdir / "spans", model_name=last.model_name,
        champion_version=args.champion or last.champion_version,
        anchor_version=args.anchor or last.anchor_version, alpha=last.alpha,
        relative_scale=last.relative_scale)
    print(format_impact(table))
    return 0


def _anchor(args: argparse.Namespace, config) -> int:
    from gating.show import GateLookupError, local_store
    from runtime import registry

    try:
        uri = args.tracking_uri or local_store(args.workdir)[0]
        before = registry.move_anchor(uri, config.model_name, args.version, args.reason)
    except (ValueError, GateLookupError) as e:
        return _lookup_failed(e)
    print(f"{config.model_name}: anchor v{before} -> v{args.version} ({args.reason})")
    if config.fleet.router_url:
        from deploy.fleet.canary import RouterTarget, reload_replicas

        target = RouterTarget(config.fleet.router_url, config.fleet.admin_token)
        holdback = target.client().groups()["holdback"]
        reload_replicas(holdback, args.version, target.admin_token)
        print(f"holdback replicas now serve v{args.version}: {', '.join(holdback) or 'none'}")
    return 0


def _ui(workdir: Path) -> int:
    from runtime.services import MlflowServer

    server = MlflowServer.start(workdir / "mlflow")
    try:  # from here a Ctrl-C stops the server, whenever it comes
        from ratchet.config import RatchetConfig
        from runtime.registry import runs_page

        print(f"MLflow UI: {runs_page(server.uri, RatchetConfig().experiment)}  (Ctrl-C to stop)",
              flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


def _spans(args: argparse.Namespace) -> int:
    from ingest.spans import SpanStore, span_location

    store = SpanStore(args.workdir / "spans")
    if args.spans_command == "show":
        from ratchet.spans_view import describe_span

        try:
            print(describe_span(args.workdir, args.span_id))
        except LookupError as e:  # no spans there, or no such span: the operator's mistake
            print(f"ratchet: error: {e}", file=sys.stderr)
            return EXIT_USAGE
        return 0
    if args.spans_command == "list":
        spans = store.manifests_list()
        if not spans:
            print(f"ratchet: no spans in {args.workdir / 'spans'} (the cycles' --workdir, e.g. "
                  f"--workdir .demo)", file=sys.stderr)
        for m in spans:
            print(f"{m['span_id']}\t{m['status']}\t{m['rows']} rows")
        return 0
    try:
        m = store.release(args.span_id, note=args.note)
    except (ValueError, FileNotFoundError) as e:
        print(f"ratchet: error: cannot release {args.span_id}: {e}", file=sys.stderr)
        return EXIT_USAGE
    where = span_location([Path(f) for f in m["files"]])
    print(f"{m['span_id']}: released, {m['rows']} rows now in {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

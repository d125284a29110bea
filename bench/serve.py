"""Serving cost of behaviour logging: one replica with and without it, in the same run.

    python bench/serve.py --requests 1500 --concurrency 2 --max-tokens 8

Starts a local broker and MLflow server, registers an untrained toy MoE, and starts two replicas
of it: one logging every completion to Kafka (``RATCHET_LOG_BEHAVIOUR=true``), one not. The load
alternates between them in blocks (A, B, A, B, ...), so drift of the machine hits both alike;
requests are sent by ``--concurrency`` client threads, latency is measured at the client.

Prints the figures and writes ``bench/results/serve.json`` with ``rps_with``, ``rps_without``,
``p50_ms_*``, ``p99_ms_*``, ``p99_overhead_ms`` (= p99 with − p99 without; goal < 1 ms), and the
replica's own count of events sent to Kafka (every request of the logging replica must be there).

End-to-end differences of a few ms are within the noise of a shared 2-core machine, so the bench
also times the request path's share of logging directly (``log_path_us_p50/p99``): building the
``Completion`` event and queueing it, in-process, with the real logger thread producing to the
same broker meanwhile (GIL contention included).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TOKEN = "bench-serve-token"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


class Load:
    """Blocks of requests from ``concurrency`` threads; latencies and busy time per target."""

    def __init__(self, concurrency: int, max_tokens: int) -> None:
        import httpx

        self.client = httpx.Client(timeout=60, limits=httpx.Limits(max_keepalive_connections=64))
        self.pool = ThreadPoolExecutor(concurrency)
        self.max_tokens = max_tokens
        self.latencies: dict[str, list[float]] = {}
        self.busy_s: dict[str, float] = {}

    def _one(self, url: str, i: int) -> float:
        start = time.perf_counter()
        r = self.client.post(
            f"{url}/v1/completions",
            json={
                "prompt": "# evaluate\n12+7 = ",
                "max_tokens": self.max_tokens,
                "temperature": 1.0,
                "seed": i,
                "conversation_id": f"bench-{i}",
                "user_id": f"u{i % 50}",
                "task_kind": "arith",
            },
        )
        r.raise_for_status()
        return (time.perf_counter() - start) * 1000.0

    def block(self, name: str, url: str, n: int, offset: int) -> None:
        start = time.perf_counter()
        lat = list(self.pool.map(lambda i: self._one(url, i), range(offset, offset + n)))
        self.busy_s[name] = self.busy_s.get(name, 0.0) + time.perf_counter() - start
        self.latencies.setdefault(name, []).extend(lat)


def sent_events(url: str) -> float:
    import httpx

    text = httpx.get(f"{url}/metrics").text
    m = re.search(r'^ratchet_behaviour_events_total\{outcome="sent"\} ([0-9.e+]+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


def run(args: argparse.Namespace) -> dict:
    from deploy.fleet import Fleet
    from deploy.toy_models import register_untrained
    from runtime.services import Broker, MlflowServer

    work = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    with MlflowServer.start(work / "mlflow") as mlflow_srv, Broker.start(work / "broker") as broker:
        version = register_untrained(mlflow_srv.uri, "bench-serve", seed=0, workdir=work)
        common = dict(
            n_replicas=1,
            tracking_uri=mlflow_srv.uri,
            model_name="bench-serve",
            version=version,
            bootstrap=broker.bootstrap,
            admin_token=TOKEN,
        )
        with (
            Fleet.start(**common, workdir=work / "with", name="with") as with_log,
            Fleet.start(
                **common,
                workdir=work / "without",
                name="without",
                extra_env={"RATCHET_LOG_BEHAVIOUR": "false"},
            ) as without_log,
        ):
            targets = {"with": with_log.urls[0], "without": without_log.urls[0]}
            load = Load(args.concurrency, args.max_tokens)
            for name, url in targets.items():  # warm-up, not measured
                load.block(f"warmup-{name}", url, 50, 0)
            offset, block = 0, args.block
            while offset < args.requests:
                for name, url in targets.items():
                    load.block(name, url, min(block, args.requests - offset), offset)
                offset += block
            time.sleep(1.0)
            logged = sent_events(targets["with"])
        result = summarise(load, args, logged)
        result.update(log_path_cost(broker.bootstrap, work, args.max_tokens))
    return result


def log_path_cost(
    bootstrap: str, work: Path, max_tokens: int, n: int = 5000, interval_s: float = 0.002
) -> dict:
    """Time ``_log_completion`` (the request thread's whole logging cost) ``n`` times, one every
    ``interval_s`` (500/s: far above one replica's rate, so the logger thread stays busy)."""
    from datetime import UTC, datetime

    from deploy.api import CompletionRequest
    from deploy.behaviour_log import BehaviourLogger
    from deploy.metrics import ServerMetrics
    from deploy.routes.completions import _log_completion
    from deploy.spool import Spool
    from deploy.toy_models import build_untrained
    from policy.toy.generate import generate

    req = CompletionRequest(
        prompt="# evaluate\n12+7 = ",
        max_tokens=max_tokens,
        seed=0,
        conversation_id="c",
        user_id="u",
        task_kind="arith",
    )
    gen = generate(
        build_untrained(0), [req.prompt], max_new_tokens=max_tokens, temperature=1.0, seed=0
    )[0]
    logger = BehaviourLogger(
        bootstrap=bootstrap, spool=Spool(work / "micro-spool", max_bytes=1 << 30)
    )
    metrics = ServerMetrics(replica="micro")
    created = datetime.now(UTC)
    costs = []
    for i in range(n):
        start = time.perf_counter_ns()
        _log_completion(
            logger, metrics, "bench-serve", 1, req, gen, f"cmpl-micro-{i}", created, 10.0
        )
        costs.append((time.perf_counter_ns() - start) / 1000.0)
        time.sleep(interval_s)
    flushed = logger.flush(timeout_s=60)
    sent = logger.stats.sent
    logger.close()
    return {
        "log_path_us_p50": round(percentile(costs, 50), 1),
        "log_path_us_p99": round(percentile(costs, 99), 1),
        "log_path_events": n,
        "log_path_events_sent": sent,
        "log_path_flushed": flushed,
    }


def summarise(load: Load, args: argparse.Namespace, logged: float) -> dict:
    out: dict = {
        "requests_per_arm": args.requests,
        "concurrency": args.concurrency,
        "max_tokens": args.max_tokens,
    }
    for name in ("with", "without"):
        lat = load.latencies[name]
        out[f"rps_{name}"] = round(len(lat) / load.busy_s[name], 2)
        out[f"p50_ms_{name}"] = round(percentile(lat, 50), 3)
        out[f"p99_ms_{name}"] = round(percentile(lat, 99), 3)
        out[f"mean_ms_{name}"] = round(statistics.fmean(lat), 3)
    out["p99_overhead_ms"] = round(out["p99_ms_with"] - out["p99_ms_without"], 3)
    out["p50_overhead_ms"] = round(out["p50_ms_with"] - out["p50_ms_without"], 3)
    out["events_sent_by_logging_replica"] = int(logged)
    out["events_expected"] = args.requests + 50
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1500, help="Measured requests per arm.")
    parser.add_argument("--concurrency", type=int, default=1, help="Client threads.")
    parser.add_argument("--max-tokens", type=int, default=8, help="Tokens per completion.")
    parser.add_argument("--block", type=int, default=25, help="Requests per alternating block.")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "serve.json")
    args = parser.parse_args()
    result = run(args)
    for key, value in result.items():
        print(f"{key:>34}: {value}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

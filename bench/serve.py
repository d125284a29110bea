"""Serving throughput and latency at concurrency 1, 8 and 32, and the cost of behaviour logging.

    python bench/serve.py                       # the committed figures
    python bench/serve.py --requests-per-client 10 --max-tokens 8

Starts a local broker and MLflow server, registers an untrained toy MoE, and starts two replicas
of it (torch engine, dynamic batcher): one logging every completion to Kafka, one not
(``RATCHET_LOG_BEHAVIOUR=false``). For each concurrency, an asyncio client sends OpenAI
``/v1/completions`` requests in alternating blocks (A, B, A, B, ...), so drift of the shared
machine hits both arms alike; latency is measured at the client.

Per concurrency it reports requests/s and p50/p99 per arm, and the logging overhead as a
*paired* difference: block pairs (A_i, B_i) that ran back to back are resampled together
(bootstrap, 2000 resamples, seed 0) to give a 95% CI of the p50 and p99 differences. Because
end-to-end differences of a millisecond are within the noise of a shared 2-core machine, it also
times the request path's own share of logging in-process (``log_path_us_*``: building the
``Completion`` event and queueing it, with the real logger thread producing to the same broker,
GIL contention included). Goal: p99 overhead < 1 ms.

Writes ``bench/results/serve.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TOKEN = "bench-serve-token"
PROMPT = "# evaluate\n12+7 = "


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


async def _block(client, url: str, n: int, concurrency: int, offset: int, max_tokens: int):
    """``n`` requests from ``concurrency`` workers; returns (latencies_ms, busy seconds)."""
    latencies: list[float] = []
    counter = iter(range(offset, offset + n))

    async def worker() -> None:
        for i in counter:
            body = {
                "prompt": PROMPT,
                "max_tokens": max_tokens,
                "temperature": 1.0,
                "seed": i,
                "user": f"u{i % 50}",
                "metadata": {"task_kind": "arith"},
            }
            start = time.perf_counter()
            r = await client.post(
                f"{url}/v1/completions", json=body, headers={"X-Conversation-Id": f"bench-{i}"}
            )
            r.raise_for_status()
            latencies.append((time.perf_counter() - start) * 1000.0)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, time.perf_counter() - start


async def measure(
    targets: dict[str, str], concurrency: int, pairs: int, block: int, max_tokens: int
) -> dict:
    """Alternating blocks of ``block`` requests per arm, ``pairs`` times, after a warm-up."""
    import httpx

    limits = httpx.Limits(max_connections=concurrency * 2, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        for url in targets.values():
            await _block(client, url, max(block, 2 * concurrency), concurrency, 0, max_tokens)
        blocks: dict[str, list[list[float]]] = {name: [] for name in targets}
        busy = dict.fromkeys(targets, 0.0)
        offset = 10_000
        for p in range(pairs):
            order = list(targets) if p % 2 == 0 else list(reversed(targets))
            for name in order:
                lat, secs = await _block(
                    client, targets[name], block, concurrency, offset, max_tokens
                )
                blocks[name].append(lat)
                busy[name] += secs
                offset += block
    return summarise(blocks, busy, concurrency)


def summarise(blocks: dict[str, list[list[float]]], busy: dict[str, float], c: int) -> dict:
    out: dict = {"concurrency": c}
    for name, bl in blocks.items():
        lat = [x for b in bl for x in b]
        out[f"requests_{name}"] = len(lat)
        out[f"rps_{name}"] = round(len(lat) / busy[name], 2)
        out[f"p50_ms_{name}"] = round(percentile(lat, 50), 2)
        out[f"p99_ms_{name}"] = round(percentile(lat, 99), 2)
    for q in (50, 99):
        diff, lo, hi = paired_diff(blocks["with"], blocks["without"], q)
        out[f"p{q}_overhead_ms"] = round(diff, 2)
        out[f"p{q}_overhead_ci95_ms"] = [round(lo, 2), round(hi, 2)]
    return out


def paired_diff(a: list[list[float]], b: list[list[float]], q: float, n_boot: int = 2000):
    """Percentile ``q`` of A minus that of B, and a 95% bootstrap CI resampling block pairs."""

    def stat(idx: list[int]) -> float:
        return percentile([x for i in idx for x in a[i]], q) - percentile(
            [x for i in idx for x in b[i]], q
        )

    rng = random.Random(0)
    k = len(a)
    boots = sorted(stat([rng.randrange(k) for _ in range(k)]) for _ in range(n_boot))
    return stat(list(range(k))), boots[int(0.025 * n_boot)], boots[int(0.975 * n_boot) - 1]


def sent_events(url: str) -> float:
    import httpx

    text = httpx.get(f"{url}/metrics").text
    m = re.search(r'^ratchet_behaviour_events_total\{outcome="sent"\} ([0-9.e+]+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


def run(args: argparse.Namespace) -> dict:
    from deploy.fleet.fleet import Fleet
    from deploy.replica.toy_models import register_untrained
    from runtime.services import Broker, MlflowServer

    work = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    result: dict = {"max_tokens": args.max_tokens, "engine": "torch (max_batch 32, wait 2 ms)"}
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
            result["by_concurrency"] = []
            for c in args.concurrency:
                block = max(args.min_block, 2 * c)
                pairs = max(args.pairs, (args.requests_per_client * c) // block)
                row = asyncio.run(measure(targets, c, pairs, block, args.max_tokens))
                print(json.dumps(row))
                result["by_concurrency"].append(row)
            time.sleep(1.0)
            result["events_sent_by_logging_replica"] = int(sent_events(targets["with"]))
            result["requests_to_logging_replica"] = sum(
                r["requests_with"] + max(args.min_block, 2 * r["concurrency"])
                for r in result["by_concurrency"]
            )
        result.update(log_path_cost(broker.bootstrap, work, args.max_tokens))
    return result


def log_path_cost(
    bootstrap: str, work: Path, max_tokens: int, n: int = 5000, interval_s: float = 0.002
) -> dict:
    """Time ``log_completion`` (the request path's whole logging cost) ``n`` times, one every
    ``interval_s`` (500/s: above one replica's rate, so the logger thread stays busy)."""
    from datetime import UTC, datetime

    from deploy.replica.behaviour_log import BehaviourLogger
    from deploy.replica.completion_log import RequestContext, log_completion
    from deploy.replica.engines.base import SamplingRequest
    from deploy.replica.engines.torch_engine import TorchEngine, ToyStepModel
    from deploy.replica.metrics import ServerMetrics
    from deploy.replica.spool import Spool
    from deploy.replica.toy_models import build_untrained

    engine = TorchEngine(lambda: ToyStepModel(build_untrained(0), 1))
    engine.start()
    req = SamplingRequest(PROMPT, max_tokens, 1.0, seed=0)
    served = asyncio.run(engine.generate([req]))[0]
    engine.close()
    logger = BehaviourLogger(
        bootstrap=bootstrap, spool=Spool(work / "micro-spool", max_bytes=1 << 30)
    )
    metrics = ServerMetrics(replica="micro")
    ctx = RequestContext("c", "u", "arith", "bench-serve", datetime.now(UTC))
    costs = []
    for i in range(n):
        start = time.perf_counter_ns()
        log_completion(logger, metrics, ctx, req, served, f"cmpl-micro-{i}")
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument(
        "--requests-per-client",
        type=int,
        default=12,
        help="Measured requests per client and arm (at least --pairs blocks).",
    )
    parser.add_argument("--pairs", type=int, default=10, help="Least block pairs per level.")
    parser.add_argument("--min-block", type=int, default=16, help="Least requests per block.")
    parser.add_argument("--max-tokens", type=int, default=8, help="Tokens per completion.")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "serve.json")
    args = parser.parse_args()
    from runtime.services import unwind_on_sigterm

    unwind_on_sigterm()  # SIGTERM stops what this run started, by PID
    result = run(args)
    print(json.dumps(result, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

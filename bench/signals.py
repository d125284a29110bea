"""Latency and throughput of the signals API on one real replica (broker, MLflow, toy model).

    python bench/signals.py [--responses 200] [--concurrency 1 8]

Starts the embedded broker and a local MLflow server, registers an untrained toy model, starts
one replica, serves ``--responses`` completions, then posts, per concurrency level, one
``/v1/edits`` with the text as it stands (scored by rapidfuzz on the replica) per response and
window, timing each call client-side. Afterwards it checks that every accepted edit reached Kafka.

Prints requests/s and p50/p99 per level and writes ``bench/results/signals.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def _post_all(url: str, key: str, bodies: list[dict], concurrency: int) -> dict:
    import httpx

    def post(client: httpx.Client, body: dict) -> float:
        t0 = time.perf_counter()
        r = client.post(f"{url}/v1/edits", json=body)
        assert r.status_code == 202, r.text
        return (time.perf_counter() - t0) * 1000.0

    with httpx.Client(headers={"Authorization": f"Bearer {key}"}, timeout=60) as client:
        t0 = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            lat = list(pool.map(lambda b: post(client, b), bodies))
        wall = time.perf_counter() - t0
    return {"concurrency": concurrency, "requests": len(bodies), "rps": len(bodies) / wall,
            "p50_ms": _pct(lat, 50), "p99_ms": _pct(lat, 99)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--responses", type=int, default=200)
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    args = p.parse_args()
    from runtime.services import unwind_on_sigterm

    unwind_on_sigterm()  # SIGTERM stops what this run started, by PID
    import httpx
    import mlflow

    from deploy.fleet.fleet import Fleet
    from deploy.replica.toy_models import register_untrained
    from ingest.kafka_io import ensure_topics, high_watermarks
    from ingest.schema import EDIT_WINDOWS_S, TOPICS
    from runtime.services import Broker, MlflowServer

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        broker, server = Broker.start(work / "broker"), MlflowServer.start(work / "mlflow")
        try:
            ensure_topics(broker.bootstrap)
            mlflow.set_tracking_uri(server.uri)
            register_untrained(server.uri, "bench-signals", seed=0, workdir=work, alias="champion")
            with Fleet.start(n_replicas=1, tracking_uri=server.uri, model_name="bench-signals",
                             bootstrap=broker.bootstrap, workdir=work / "fleet",
                             admin_token="bench-signals-admin-token") as fleet:
                url, key = fleet.urls[0], fleet.create_api_key("bench")
                served = []
                for i in range(args.responses):
                    r = httpx.post(f"{url}/v1/completions", timeout=60, json={
                        "prompt": f"# evaluate\n{i}+1 = ", "max_tokens": 16, "temperature": 1.0,
                        "seed": i, "conversation_id": f"b{i}", "user_id": "u"})
                    served.append(r.json())
                levels = []
                windows = list(EDIT_WINDOWS_S)
                for level, concurrency in enumerate(args.concurrency):
                    window = windows[level % len(windows)]
                    bodies = [{"response_id": s["id"], "window_s": window,
                               "text": s["text"][::-1] + " # edited"} for s in served]
                    levels.append(_post_all(url, key, bodies, concurrency))
                    print(json.dumps(levels[-1]), flush=True)
                fleet_ok = fleet.versions()
            in_kafka = sum(high_watermarks(broker.bootstrap, TOPICS["edit_persistence"]).values())
        finally:
            server.stop()
            broker.stop()
    result = {"levels": levels, "edits_in_kafka": in_kafka,
              "edits_posted": sum(lv["requests"] for lv in levels), "replica": fleet_ok}
    print(json.dumps(result, indent=1))
    out = ROOT / "bench" / "results" / "signals.json"
    out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()

"""Soak: N cycles of `ratchet loop` with traffic, random SIGKILLs and a broker restart; a ledger.

Starts the embedded broker (on a fixed port, so it can be restarted), a local MLflow server, the
toy champion and a fleet; then for each round: simulated traffic (every delayed signal sent), and
one cycle by a `ratchet loop --max-cycles 1` controller subprocess. In ``--kills`` of the rounds
the controller is SIGKILLed at a random moment and started again (the rerun resumes the cycle).
After round ``--restart-after`` the broker is stopped and started again on the same port. A final
controller run consumes what is left, then the ledger is checked:

    completions produced = reward rows trained on + rows not trained yet + dead-lettered completions
    signals produced     = signals joined into rows + late signals + dead-lettered signals

``lost`` counts produced events found nowhere, ``duplicated`` reward rows that appear more than
once across the training data of gated candidates. Prints the figures and writes
bench/results/soak.json (``cycles``, ``kills``, ``events``, ``lost``, ``duplicated`` and details).

The broker restart and the ledger: the embedded Tansu broker is memory-only, so a restart loses
its topics, the consumer group's commits and every event not ingested yet. The soak restarts it
right after a cycle's ingest committed its span (nothing in flight is then lost); ingest sees the
group's commits gone and reads the recreated topics from offset 0 (ingest/pipeline.py). Events
produced while the broker is down are spooled by the replicas and sent after it is back; a
restart with events not yet ingested would lose them, which is what a durable broker is for.
Dead letters and late signals are counted from the span manifests, which outlive the broker.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # bench/ingest.py would shadow the ingest package
RESULTS = ROOT / "bench" / "results" / "soak.json"
SIGNAL_COLUMNS = ("edit_persistence_30", "edit_persistence_120", "edit_persistence_300",
                  "edit_persistence_600", "feedback_accept")


def _config(args: argparse.Namespace) -> dict:
    from deploy.simulator import SIMULATED_SKEW_S

    return {
        "model_name": "soak-toy",
        "champion": {"sft_steps": 60, "seed": 0},
        "min_rows_to_train": 8,
        "gate": {"suite": {"size": 16, "max_new_tokens": 16}},
        "trainer": {"seed": 0, "steps": 2, "batch_size": 32},
        "ingest": {"drain": True, "parse": {"max_future_skew_s": SIMULATED_SKEW_S}},
        "lock": {"ttl_s": 20.0, "wait_s": 120.0, "settle_s": 0.3},
        "simulator": {"requests_per_round": args.requests, "concurrency": 4, "seed": args.seed},
    }


def _recording_simulator(**kwargs):
    """A UserSimulator that remembers the response ids it was served (``.ids``)."""
    from deploy.simulator import UserSimulator

    class Recording(UserSimulator):
        def _judge(self, served, errors):
            self.ids.extend(s.response["id"] for s in served)
            return super()._judge(served, errors)

    sim = Recording(**kwargs)
    sim.ids = []
    return sim


def _controller(argv: list[str], log: Path, rng: random.Random, kill: bool) -> int:
    """Run one `ratchet loop --max-cycles 1`; with ``kill``, SIGKILL it at a random moment and
    rerun until it finishes. Returns how many kills landed."""
    kills = 0
    while True:
        with open(log, "a") as out:
            proc = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                    env={**os.environ, "PYTHONPATH": str(ROOT)})
        if kill and kills == 0:
            try:
                proc.wait(timeout=rng.uniform(20.0, 180.0))
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                kills += 1
                print(f"  SIGKILLed the controller (pid {proc.pid})", flush=True)
                continue
        rc = proc.wait()
        if rc != 0:
            raise RuntimeError(f"controller exited {rc}; see {log}")
        return kills


def _restart_broker(broker, workdir: Path, k: int):
    from ingest.kafka_io import ensure_topics
    from runtime.services import Broker

    port = broker.port
    broker.stop()
    time.sleep(2.0)  # replicas see the broker gone and spool
    broker = Broker.start(workdir / f"broker-{k}", port=port)
    ensure_topics(broker.bootstrap)
    print(f"  restarted the broker on port {port} (topics and commits lost)", flush=True)
    return broker


def _ledger(uri: str, model: str, spans_root: Path, produced_ids: list[str],
            signals_produced: int) -> dict:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from mlflow import MlflowClient

    from ingest.schema import TOPICS
    from ingest.spans import SpanStore

    store = SpanStore(spans_root)
    manifests = {m["span_id"]: m for m in store.manifests_list()}
    client = MlflowClient(uri, registry_uri=uri)
    gated = [v for v in client.search_model_versions(f"name = '{model}'")
             if "gate.verdict" in v.tags]
    trained_spans = Counter(s for v in gated for s in v.tags["ratchet.span_ids"].split(","))

    def rows_of(span_ids):
        tables = [pq.read_table(spans_root / f) for i in span_ids for f in manifests[i]["files"]]
        return tables

    trained = rows_of(trained_spans)
    untrained = rows_of(i for i, m in manifests.items()
                        if m["rows"] > 0 and i not in trained_spans)
    trained_ids = Counter(r for t in trained for r in t.column("response_id").to_pylist())
    untrained_ids = {r for t in untrained for r in t.column("response_id").to_pylist()}
    dead = [d for i in manifests for d in store.dead_letters(i, "dead_letters")]
    late = [d for i in manifests for d in store.dead_letters(i, "late")]
    dead_completions = [d for d in dead if d.topic == TOPICS["completion"]]
    dead_ids = {_response_id(d.payload) for d in dead_completions}
    joined = 0
    for t in trained + untrained:
        joined += sum(t.num_rows - t.column(c).null_count for c in SIGNAL_COLUMNS)
        followup = pc.or_(pc.is_valid(t.column("followup_text")),
                          pc.is_valid(t.column("followup_dissatisfied")))
        joined += int(pc.sum(followup).as_py() or 0)
    produced = set(produced_ids)
    found = set(trained_ids) | untrained_ids | dead_ids
    signals_accounted = joined + len(late) + (len(dead) - len(dead_completions))
    return {
        "completions_produced": len(produced_ids),
        "reward_rows_trained": sum(trained_ids.values()),
        "reward_rows_not_trained_yet": len(untrained_ids),
        "dead_letters": len(dead),
        "dead_letter_completions": len(dead_completions),
        "late_signals": len(late),
        "signals_produced": signals_produced,
        "signals_joined": joined,
        "signals_unaccounted": signals_produced - signals_accounted,
        "completions_lost": len(produced - found),
        "completions_unknown": len(found - produced),
        "duplicated": sum(c - 1 for c in trained_ids.values() if c > 1)
        + sum(c - 1 for c in trained_spans.values() if c > 1),
        "gated_candidates": len(gated),
        "promotions": sum(v.tags.get("ratchet.promotion", "").startswith("promoted")
                          for v in gated),
    }


def _response_id(payload: str) -> str | None:
    try:
        return json.loads(payload).get("response_id")
    except (ValueError, AttributeError):
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--kills", type=int, default=2)
    parser.add_argument("--restart-after", type=int, default=1, help="round after which the "
                        "broker is restarted (-1: never)")
    parser.add_argument("--requests", type=int, default=48, help="completions per round")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path, default=ROOT / ".soak")
    args = parser.parse_args()
    run(args)


def run(args: argparse.Namespace) -> dict:
    import shutil

    from deploy.fleet import Fleet
    from deploy.simulator import SIMULATED_SKEW_S
    from ingest.kafka_io import ensure_topics
    from ratchet.bootstrap import ensure_champion
    from ratchet.config import RatchetConfig
    from runtime.services import Broker, MlflowServer

    t0 = time.perf_counter()
    rng = random.Random(args.seed)
    work = args.workdir.resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    cfg_dict = _config(args)
    (work / "config.json").write_text(json.dumps(cfg_dict))
    config = RatchetConfig.model_validate(cfg_dict)
    kill_rounds = set(rng.sample(range(args.cycles), min(args.kills, args.cycles)))
    broker = Broker.start(work / "broker")
    server = MlflowServer.start(work / "mlflow")
    fleet = sim = None
    kills, signals = 0, 0
    try:
        ensure_topics(broker.bootstrap)
        ensure_champion(config, tracking_uri=server.uri, workdir=work / "ctl")
        fleet = Fleet.start(n_replicas=1, tracking_uri=server.uri, model_name=config.model_name,
                            bootstrap=broker.bootstrap, workdir=work / "fleet",
                            admin_token=config.fleet.admin_token,
                            signal_max_skew_s=SIMULATED_SKEW_S)
        sim = _recording_simulator(urls=fleet.urls, api_key=fleet.create_api_key("soak"),
                                   speed=600.0, seed=args.seed)
        argv = [sys.executable, "-m", "ratchet.cli", "loop", "--config", str(work / "config.json"),
                "--workdir", str(work / "ctl"), "--bootstrap", broker.bootstrap,
                "--tracking-uri", server.uri, "--every", "60s", "--max-cycles", "1"]
        for k in range(args.cycles):
            stats = sim.run_round(args.requests, concurrency=4)
            sim.drain()
            signals += stats.signals_scheduled
            print(f"round {k}: {stats.requests - stats.errors} completions, "
                  f"{stats.signals_scheduled} signals", flush=True)
            kills += _controller(argv, work / "controller.log", rng, k in kill_rounds)
            if k == args.restart_after:
                broker = _restart_broker(broker, work, k)
        time.sleep(3.0)  # spooled events flushed by the replicas
        _controller(argv, work / "controller.log", rng, False)  # consume what is left
        figures = _ledger(server.uri, config.model_name, work / "ctl" / "spans", sim.ids, signals)
        sim.drain()
        figures["signals_send_failed"] = len(sim._scheduler.failed)
    finally:
        if sim is not None:
            sim.close()
        if fleet is not None:
            fleet.stop()
        broker.stop()
        server.stop()
    events = figures["completions_produced"] + figures["signals_produced"]
    lost = figures["completions_lost"] + max(0, figures["signals_unaccounted"])
    result = {"cycles": args.cycles, "kills": kills, "events": events, "lost": lost,
              "duplicated": figures["duplicated"], "broker_restarts": int(args.restart_after >= 0),
              "seed": args.seed, "seconds": round(time.perf_counter() - t0, 1), **figures}
    print(json.dumps(result, indent=1))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
